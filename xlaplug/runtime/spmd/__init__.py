"""Many devices of one module: in one process (threads or fibers meeting at a rendezvous),
a rank's devices under MPI, and shard_map regions run on their mesh.  The collectives'
kernels and transports they meet through are backends/spmd's."""
