"""Many devices running one module (SPMD): replicas and partitions as XLA numbers them.

* groups.py      which devices a collective joins (XLA's collective_ops_utils.cc rules);
* rendezvous.py  devices meeting per collective call, with a timeout that names who did not
                 come and where each waiting device stood;
* semantics.py   what each collective computes from the values of its participants;
* kernels.py     the collective kernels (CPU and CUDA: CUDA stages through the host);
* runner.py      every device at once (device_threads.py: a thread each; device_fibers.py:
                 greenlets taking turns, for small arrays), an error on one stopping all.
"""
