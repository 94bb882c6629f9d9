"""run.py --isa avx2: both engines generate AVX2 code on a machine with AVX-512, as on a CPU
without it (AMD Zen 2 and 3, most desktop Intel chips; the `device` tool's 13-core host is
a Zen 3) -- set in the environment before numba and jax start, so the one-core child and
the multi-device worker inherit it.

XLA:CPU takes `--xla_cpu_max_isa=AVX2`.  numba takes a CPU name and its feature list
(NUMBA_CPU_NAME / NUMBA_CPU_FEATURES: with only the name it keeps the host's features);
its on-disk cache keys code by both, so AVX2 code and the host's do not mix.  numpy's
OpenBLAS is held to its Haswell kernels (OPENBLAS_CORETYPE), as it picks on such a CPU.
"""
from __future__ import annotations

import os

# LLVM's names for the x86-64 features of an AVX2 CPU with FMA (Haswell and later).
AVX2_FEATURES = ",".join(f"+{f}" for f in (
    "64bit", "cx16", "sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx",
    "avx2", "fma", "f16c", "bmi", "bmi2", "lzcnt", "movbe"))
CHOICES = ("native", "avx2")


def requested(argv: list[str]) -> str:
    """The --isa value in argv (read before argparse runs: it must act before imports)."""
    for k, a in enumerate(argv):
        if a == "--isa" and k + 1 < len(argv):
            return argv[k + 1]
        if a.startswith("--isa="):
            return a.split("=", 1)[1]
    return "native"


def hold(argv: list[str]) -> str:
    """Set the environment for the ISA argv asks for; returns it."""
    isa = requested(argv)
    if isa == "avx2":
        flags = os.environ.get("XLA_FLAGS", "")
        if "--xla_cpu_max_isa" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_max_isa=AVX2").strip()
        os.environ["NUMBA_CPU_NAME"] = "haswell"
        os.environ["NUMBA_CPU_FEATURES"] = AVX2_FEATURES
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    return isa  # (another value is argparse's to refuse)
