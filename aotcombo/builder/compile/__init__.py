"""Compilation with no GPU: combo kernels to cubin and PTX per arch (cached, in parallel), and the
runtime's C extensions."""
