"""CPU kernels: every module here registers kernels into backends.registry on import."""
