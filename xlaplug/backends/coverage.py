"""Core opcodes that no device kernel runs, each with the reason, and the two the executor
runs itself.  `xlaplug list-opcodes` reads these beside the kernel registry, and a test
checks that every core opcode has a shape rule and a kernel on every device or is listed
here."""
from __future__ import annotations

# Run by the executor on every device (backends/executor.py), not through the registry.
BY_EXECUTOR = {
    "parameter": "ExecContext.run",     # bound to the computation's arguments
    "constant": "_constant_kernel",     # the literal, copied to the device once per run
}

NOT_SUPPORTED: dict[str, str] = {
    "custom-call": "no core kernel: a plugin provides the target's kernel or decomposition "
                   "(custom-call-lowering)",
    "batch-norm-training": "no kernel: XLA rewrites batch-norm into core ops "
                           "(BatchNormExpander) before a backend sees it",
    "batch-norm-inference": "no kernel: XLA rewrites batch-norm into core ops "
                            "(BatchNormExpander) before a backend sees it",
    "batch-norm-grad": "no kernel: XLA rewrites batch-norm into core ops "
                       "(BatchNormExpander) before a backend sees it",
    "domain": "no kernel: a sharding-domain marker XLA removes (DomainRemover) before "
              "code generation",
    "dynamic-reshape": "no kernel: dynamic (runtime-sized) shapes are not run",
    "scaled-dot": "no kernel yet: parsed and shape-checked (a dot of block-scaled low-precision "
                  "operands); running it is a clear error",
    "erf-inv": "no kernel yet",
    "infeed": "no kernel: a run has no host infeed queue",
    "outfeed": "no kernel: a run has no host outfeed queue",
    "send": "no kernel: a run has one device and no channel to send on",
    "send-done": "no kernel: a run has one device and no channel to send on",
    "recv": "no kernel: a run has one device and no channel to receive from",
    "recv-done": "no kernel: a run has one device and no channel to receive from",
    "ragged-all-to-all": "no kernel yet",
    "ragged-dot": "no kernel yet",
    "scan": "no kernel yet (jax lowers lax.scan to while, which runs)",
}
