if x:
	pass
if x:
	pass
