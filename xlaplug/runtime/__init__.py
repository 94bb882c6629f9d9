"""Running a compiled module: `Executable.run(inputs, RunOptions) -> RunResult`, the thunk
sequence, executor, kernel cache, profiler, and the orchestration of devices (one device,
devices in one process, one device per MPI rank)."""
