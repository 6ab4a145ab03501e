def f():
	x = 1	# tab
	return x
