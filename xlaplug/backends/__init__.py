"""Execution backends: thunk sequences, buffer assignment, CPU and CUDA kernels."""
