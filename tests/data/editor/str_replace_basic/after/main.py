import os


def main():
	print('hello, world')
	return 0


if __name__ == '__main__':
	main()
