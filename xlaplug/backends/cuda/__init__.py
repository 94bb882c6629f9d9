"""CUDA kernels (numba.cuda): every module here registers kernels for device "cuda".

A CUDA kernel has the CPU signature `fn(ins, args, ctx)`, but `args` are numba.cuda device
arrays and it returns device arrays: buffers stay on the device for the whole thunk
sequence.  Importing these modules needs no GPU; kernels compile on first launch.
"""
