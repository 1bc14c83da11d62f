"""The launch plan: dependency levels, combo kernels of mutually independent kernels, and
fixed block sizes by rule."""
