"""Sources from ``templates/``: combo kernels and the package's program; the program checked
on meta tensors."""
