import os


def main():
	print('hello')
	return 0


if __name__ == '__main__':
	main()
