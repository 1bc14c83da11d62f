"""The user's tools around the build: the command line (``cli``), ``inspect`` of a built
package (``inspection``), and a check of a built program on the CPU (``interpret``)."""
