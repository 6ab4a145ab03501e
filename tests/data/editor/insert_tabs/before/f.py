def f():
	return x
