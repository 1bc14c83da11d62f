"""The user's tools around the build: the command line (``cli``: its options and error
reporting; ``commands``: what build, inspect and cache do), ``inspect`` of a built package
(``inspection``), and a check of a built program on the CPU (``interpret``)."""
