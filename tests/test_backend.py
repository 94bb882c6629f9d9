"""One Backend object per device (issue 21, item 3): the shared layer asks it what the device
provides and how it runs kernels, and never compares device names."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import xlaplug
from xlaplug.backends.backend import BACKENDS, Backend, backend_for
from xlaplug.backends.registry import EVERY_DEVICE, KERNELS, lookup
from xlaplug.hlo.errors import HloError

PACKAGE = Path(xlaplug.__file__).parent
DEVICE_NAMES = {"cpu", "cuda"}
# Where a device name may be compared: the devices' own packages, and xla/, whose "cpu" is
# XLA's platform (jax.devices("cpu")), not an xlaplug device.
MAY_NAME_DEVICES = ("backends/cpu", "backends/cuda", "xla")


def test_every_device_has_a_backend_with_the_declared_interface():
    for name in BACKENDS:
        b = backend_for(name)
        assert isinstance(b, Backend) and b.name == name
        assert b.kernel_package.endswith(f".{name}")
    assert backend_for("cpu").on_host and not backend_for("cuda").on_host


def test_an_unknown_device_is_a_one_line_error():
    with pytest.raises(HloError, match="device must be 'cpu' or 'cuda', got 'tpu'"):
        backend_for("tpu")
    with pytest.raises(HloError, match="got 'tpu'"):
        xlaplug.compile("HloModule m\nENTRY e { ROOT p = f32[2] parameter(0) }", device="tpu")
    assert lookup("tuple", "tpu") is None  # a plugin may name a device xlaplug has none for


def test_kernels_that_only_move_values_or_talk_to_peers_are_registered_once():
    lookup("tuple", "cpu")  # loads common/ and spmd/
    shared = {op: fn for (op, dev), fn in KERNELS.items() if dev == EVERY_DEVICE}
    assert {"tuple", "call", "conditional", "all-reduce", "all-gather", "collective-permute",
            "replica-id"} <= set(shared)
    twice = [(op, dev) for (op, dev), fn in KERNELS.items()
             if dev in DEVICE_NAMES and shared.get(op) is fn]
    assert not twice, f"registered for every device and again per device: {twice}"
    assert lookup("all-reduce", "cpu") is shared["all-reduce"]


def test_the_cpu_backend_runs_its_reductions_flushed_and_plugin_kernels_as_written():
    from xlaplug.backends.cpu.denormals import FLUSHED_ARITH, FLUSHED_OPCODES, available
    b = backend_for("cpu")
    own = b.own_kernels()
    for op in (*FLUSHED_OPCODES, *FLUSHED_ARITH):
        fn = own(op)
        assert (fn is not b.kernel(op)) == available()  # flushing() / flushed_arith() wrap it
        assert getattr(fn, "__wrapped__", fn) is b.kernel(op)
    assert own("maximum") is b.kernel("maximum")

    def plugin_kernel(ins, args, ctx):
        return args[0]
    assert b.adapt_kernel(None, plugin_kernel) is plugin_kernel


def _name_tests(path: Path) -> list[int]:
    def is_name(n):
        if isinstance(n, ast.Constant):
            return n.value in DEVICE_NAMES
        return isinstance(n, (ast.Tuple, ast.List, ast.Set)) and any(map(is_name, n.elts))
    return [n.lineno for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Compare) and any(map(is_name, [n.left, *n.comparators]))]


def test_the_shared_layer_never_compares_device_names():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(MAY_NAME_DEVICES):
            continue
        bad += [f"xlaplug/{rel}:{line}" for line in _name_tests(path)]
    assert not bad, "device names compared outside the backends (ask backend_for(name)):\n  " \
        + "\n  ".join(bad)


def test_the_plugin_api_names_the_same_devices():
    """plugin/api.py keeps its own tuple of device names, so that `from xlaplug.plugin
    import Plugin` loads no backend module (tests/test_layering.py); it must not drift."""
    from xlaplug.plugin.api import DEVICES
    assert tuple(DEVICES) == tuple(BACKENDS)
