"""Many devices running one module (SPMD): replicas and partitions as XLA numbers them.

* groups.py      which devices a collective joins (XLA's collective_ops_utils.cc rules);
* rendezvous.py  devices meeting per collective call, in threads, with a timeout that names
                 who did not come and where each waiting device stood;
* semantics.py   what each collective computes from the values of its participants;
* kernels.py     the collective kernels (CPU and CUDA: CUDA stages through the host);
* runner.py      one thread per device, an error on one device stopping them all.
"""
