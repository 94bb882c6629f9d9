"""The bridge to real XLA through jax/jaxlib (the optional `xla` extra).

* `jaxlib_names`: the one module that touches jaxlib's private names (XLA's HLO text parser,
  the HLO <-> StableHLO converters, the XLA:CPU client); a jaxlib upgrade that moves one
  breaks that file, and `tests/test_xla_bridge.py` names what moved.
* `cpu_client`: the process's XLA:CPU client -- jax's where the process has imported jax,
  else jaxlib's own, made as jax makes it, so that the CLI's XLA paths, MPI ranks and worker
  processes do not import jax.
* `xla_executables`: XLA compiling HLO text (a per-device program, or a global program its
  partitioner cuts) and running the executables, with the client names jaxlib_names gives;
  on jaxlib's own client, arguments and outputs are `host_arrays`' (jaxlib's arrays, the
  outputs read through DLPack, without jax).
* `source`: reading `.mlir` / `.mlirbc` (StableHLO or MHLO) as HLO text, and writing a
  module as StableHLO text (`compile --emit stablehlo`).
* `reference`: `run --reference xla`: the module with plugin ops decomposed, run on XLA:CPU
  (host devices in a subprocess for D > 1: `devices`), each output compared (`stats`:
  max abs, max relative, max ULP); cli/reference_report.py prints it.  A global program
  (jax's shard_map or automatically partitioned program, before partitioning) is
  partitioned by XLA for its mesh's device count, its values cut and put back together by
  `global_shards`.
* `check_engine`: `check-plugins --engine xla`: each kernel inside XLA against its
  decomposition run by XLA (runtime/check.py and runtime/on_xla.py drive the checks).
* `engine`: `run --engine xla` on one device, plugin kernels as typed-FFI handlers (`ffi/`).
  Many devices run on XLA's host devices (runtime/engine_devices.py), in this process or in
  a kept worker process (runtime/engine_worker.py); their communicator kernels are rewritten
  into calls that meet across XLA's device threads (`devices_rewrite`, ffi/devices_handler.py).
  Under mpiexec, runtime/mpi_engine.py: each rank's device on XLA, its collectives rewritten
  (`mpi_rewrite`, ordered by a token threaded through control flow: `mpi_order`) into calls
  that `ffi/mpi_handler.py` serves with the interpreter's kernels over MPI.

Nothing here imports jax at import time, and XLA:CPU's paths import only jaxlib where the
process has not imported jax; what stays on jax: xlaplug.jax and jax_op (jax programs),
`check-plugins --engine xla` / `--jax` (jax.jit, ffi_call), other platforms (`--reference
xla:tpu`: jax's backends), `compile --emit stablehlo` (jax's MLIR context prints the text).
Without jax installed, using the bridge is a one-line error naming the extra.
"""
