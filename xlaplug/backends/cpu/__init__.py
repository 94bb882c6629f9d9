"""CPU kernels: every module here registers kernels into backends.registry on import.

Fused loops run on numba's threads (parallel=True), through libgomp where numba picks the
OpenMP layer.  libgomp's default wait policy spins between parallel regions; on a machine
whose cores are shared (other processes, or several xlaplug devices as threads) the spinning
threads steal the cores the work needs: a 1M-element multiply-add loop measured 16-29 ms
on two loaded cores against 0.7 ms with passive waiting.  libgomp reads the policy once,
when numba first loads it, so it is set here (unless the user set it).
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
