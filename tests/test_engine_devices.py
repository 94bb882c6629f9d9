"""`xlaplug run --engine xla` on many devices in one process: XLA:CPU's host devices run a
module's replicas and partitions (or a global program's mesh), with plugin kernels as FFI
handlers, communicator kernels (the Horovod ops) meeting across XLA's device threads.  Held against the interpreter's many-device run
and against jax.  Where this process's jax has too few host devices, a worker process kept
by the executable runs them (the cases here); with enough (tests/engine_devices_program.py,
started with 4), XLA runs them in the process.  Either way the module is compiled once."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

jax = pytest.importorskip("jax")

from xlaplug.cli import main  # noqa: E402

pytestmark = pytest.mark.jax
ROOT = Path(__file__).resolve().parents[1]

ALLREDUCE = """HloModule allreduce4, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[5,3] parameter(0)
  s = f32[3] parameter(1)
  r = f32[5,3] all-reduce(x), replica_groups={{0,2},{1,3}}, to_apply=add
  ROOT y = f32[5,3] custom-call(r, s), custom_call_target="example.rms_norm", backend_config={epsilon = 1.000000e-06 : f32}
}
"""


def run(*args, tmp):
    r = CliRunner().invoke(main, [a.replace("@", str(tmp) + "/") for a in args])
    return r.exit_code, r.output


@pytest.mark.slow  # two worker processes of XLA on host devices, ~1.5 s each
def test_replicas_with_a_core_all_reduce_and_a_plugin_kernel_match_the_interpreter(tmp_path):
    """replica_count=4 in the header: XLA's all-reduce over two groups, then the bundled
    rms_norm kernel (loaded from its file by the worker) on every device."""
    (tmp_path / "m.hlo").write_text(ALLREDUCE)
    code, out = run("run", "@m.hlo", "--seed", "3", "--out", "@m.npz", tmp=tmp_path)
    assert code == 0, out
    code, out = run("run", "@m.hlo", "--seed", "3", "--engine", "xla", "--expect", "@m.npz",
                    "--json", tmp=tmp_path)
    assert code == 0, out
    got = json.loads(out)
    assert got["engine"] == "xla" and got["replicas"] == 4 and got["comparison"]["ok"]
    assert [d["device"] for d in got["devices"]] == [0, 1, 2, 3]
    # the engine's outputs per device, stacked as the interpreter's
    code, out = run("run", "@m.hlo", "--seed", "3", "--engine", "xla", "--out", "@e.npz",
                    tmp=tmp_path)
    assert code == 0 and "4 devices (4 replicas x 1 partition)" in out, out
    got, want = np.load(tmp_path / "e.npz")["out0"], np.load(tmp_path / "m.npz")["out0"]
    assert got.shape == (4, 5, 3)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # a worker process, ~1.5 s
def test_the_worker_is_kept_by_the_executable():
    """`--replicas` from the API, more devices than jax has here: the worker compiles the
    module once and serves every run of the executable, and ends with it."""
    import gc

    import xlaplug
    from xlaplug.runtime.engine_devices import host_devices
    n = host_devices() + 1
    text = ALLREDUCE.replace(", replica_count=4", "").replace("{{0,2},{1,3}}", "{}")
    exe = xlaplug.compile(text, engine="xla", replicas=n)
    first, second = exe.run(seed=5), exe.run(seed=5, repeat=3)
    program = exe.contexts.devices_engine_program(exe.source_text, first.grid)
    assert not program.here and program.ops == ["example.rms_norm"]
    assert first.timings["compile_s"] > 0 and second.timings["compile_s"] == 0
    assert len(second.run_times) == 3 and first.per_device[0][0].shape == (5, 3)
    want = xlaplug.compile(text, replicas=n).run(seed=5)
    for got in (first, second):
        np.testing.assert_allclose(got.outputs[0], want.outputs[0], rtol=1e-6, atol=1e-6)
    proc = program.worker.proc
    del exe, program
    gc.collect()
    assert proc.wait(timeout=10) == 0


HOROVOD = """HloModule hvd, replica_count=4
cond {
  s = (s32[], f32[8,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[8,3] get-tuple-element(s), index=1
  m = f32[8,3] custom-call(v), custom_call_target="HorovodAllreduce", backend_config={reduce_op = "average"}
  h = f32[8,3] tanh(m)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8,3]) tuple(j, h)
}
ENTRY e {
  x = f32[8,3] parameter(0)
  a = f32[8,3] custom-call(x), custom_call_target="HorovodAllreduce", backend_config={reduce_op = "sum"}
  g = f32[32,3] custom-call(x), custom_call_target="HorovodAllgather"
  b = f32[8,3] custom-call(x), custom_call_target="HorovodBroadcast", backend_config={root_rank = 2 : i64}
  t = f32[8,3] custom-call(x), custom_call_target="HorovodAlltoall"
  r = f32[2,3] custom-call(x), custom_call_target="HorovodReducescatter", backend_config={reduce_op = "max"}
  zero = s32[] constant(0)
  init = (s32[], f32[8,3]) tuple(zero, x)
  w = (s32[], f32[8,3]) while(init), condition=cond, body=body
  l = f32[8,3] get-tuple-element(w), index=1
  ROOT out = (f32[8,3], f32[32,3], f32[8,3], f32[8,3], f32[2,3], f32[8,3]) tuple(a, g, b, t, r, l)
}
"""


def test_horovod_kernels_meet_across_xlas_device_threads():
    """The five Horovod ops, independent of each other, and an all-reduce in a while loop:
    their communicator kernels run inside XLA on each host device and meet there, in the
    same order on every device (the order token), to the interpreter's bits."""
    import xlaplug
    exe = xlaplug.compile(HOROVOD, engine="xla")
    got = exe.run(seed=4, repeat=2)
    program = exe.contexts.devices_engine_program(exe.source_text, got.grid)
    assert program.communicators == ["HorovodAllgather", "HorovodAllreduce",
                                     "HorovodAlltoall", "HorovodBroadcast",
                                     "HorovodReducescatter"]
    want = xlaplug.compile(HOROVOD).run(seed=4)
    for g, w in zip(got.outputs, want.outputs):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_a_communicator_kernel_failing_on_one_device_is_one_line(tmp_path):
    """Device 1's kernel raises: the others stop waiting for it (not at the timeout), the
    error names the device as the interpreter's does, and the next run works."""
    import time

    import xlaplug
    from xlaplug.hlo.errors import HloError
    plugins = tmp_path / "plugins"
    plugins.mkdir(mode=0o755)
    (plugins / "flaky.py").write_text(
        "from xlaplug.plugin import Plugin\n"
        "plugin = Plugin('flaky')\n"
        "@plugin.shape('flaky.sum')\n"
        "def shape(x):\n"
        "    return x\n"
        "@plugin.kernel('flaky.sum', device='cpu', communicator=True)\n"
        "def kernel(x, out, *, comm):\n"
        "    if comm.device == 1 and x.sum() > 1e6:\n"
        "        raise ValueError('too big on device 1')\n"
        "    out[...] = comm.allreduce(x)\n")
    exe = xlaplug.compile('HloModule m, replica_count=4\nENTRY e {\n  x = f32[4] parameter(0)'
                          '\n  ROOT y = f32[4] custom-call(x), custom_call_target="flaky.sum"'
                          '\n}\n', plugins=[str(plugins)], engine="xla")
    exe.run(np.ones((4, 4), np.float32))  # (the worker's start, outside the clock below)
    t0 = time.perf_counter()
    with pytest.raises(HloError) as e:
        exe.run(np.full((4, 4), 1e7, np.float32), collective_timeout=60)
    assert time.perf_counter() - t0 < 30
    assert "device 1: plugin 'flaky' kernel for 'flaky.sum' raised ValueError: too big on " \
        "device 1" in str(e.value) and "\n" not in str(e.value), str(e.value)
    np.testing.assert_array_equal(exe.run(np.ones((4, 4), np.float32)).outputs[0],
                                  np.full((4, 4), 4, np.float32))


def test_a_plugin_made_in_python_cannot_go_to_the_worker():
    """More devices than this process's jax has: the worker loads plugins from files;
    a Plugin object made here is a one-line error saying what to do instead."""
    import xlaplug
    from xlaplug.hlo.errors import HloError
    from xlaplug.plugin import Plugin
    from xlaplug.runtime.engine_devices import host_devices
    p = Plugin("engine_devices_test")

    @p.kernel("engine_devices_test.neg")
    def neg(x, out):
        out[...] = -x
    n = host_devices() + 1  # one more than jax has here: a worker process
    exe = xlaplug.compile('HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = '
                          'f32[4] custom-call(x), custom_call_target="engine_devices_test.neg"'
                          '\n}\n', plugins=[p], engine="xla", replicas=n)
    with pytest.raises(HloError) as e:
        exe.run(seed=1)
    msg = str(e.value)
    assert "\n" not in msg and "plugin 'engine_devices_test'" in msg and \
        f"--xla_force_host_platform_device_count={n}" in msg, msg


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine_devices") / "out.npz"
    subprocess.run([sys.executable, str(Path(__file__).with_name("engine_devices_program.py")),
                    str(path)], check=True, timeout=300)
    return dict(np.load(path))


@pytest.mark.slow  # a subprocess starting jax on 4 host devices
@pytest.mark.parametrize("case", ["allreduce4", "shard_map_global", "shard_map_partitioned",
                                  "shard_map_plugin", "horovod_kernel", "horovod_global"])
def test_in_process_against_jax_and_the_interpreter(in_process, case):
    """With jax on 4 host devices XLA runs them here: a 4-replica all-reduce (and
    replica-id) compiled once, a shard_map program as jax prints it (its global outputs)
    and as XLA prints it after partitioning (each device's), a plugin kernel (the bundled
    rms_norm, an FFI call) inside a shard_map region, the Horovod all-reduce's kernel on
    XLA's device threads, and the same op in a shard_map region, decomposed."""
    z = in_process
    assert z[f"here_{case}"]
    j = 0
    while f"got_{case}_{j}" in z:
        got, want, interp = z[f"got_{case}_{j}"], z[f"want_{case}_{j}"], z[f"interp_{case}_{j}"]
        assert got.shape == want.shape == interp.shape and got.dtype == want.dtype, (case, j)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{case} {j}")
        np.testing.assert_allclose(got, interp, rtol=1e-6, atol=1e-6, err_msg=f"{case} {j}")
        j += 1
    assert j == (2 if case in ("allreduce4", "shard_map_global", "shard_map_partitioned")
                 else 1)
    assert str(z[f"served_{case}"]) == ("example.rms_norm" if case == "shard_map_plugin" else "")
    assert str(z[f"comms_{case}"]) == ("HorovodAllreduce" if case == "horovod_kernel" else "")
    assert z["second_compile_s"] == 0.0  # the second run of an executable compiles nothing


def test_a_failed_output_is_raised_once_every_devices_outputs_are_done():
    """XLA's error for one device's output is raised only after the other devices' outputs
    have been waited for: raised at once, a device still blocked in a collective the failed
    one never reached outlived the run's communicator, and the next run waited for it until
    the collective timeout (seen once under load)."""
    from xlaplug.xla.xla_executables import _every_output

    class Leaf:  # one output of every device, as disassemble_into_single_device_arrays gives
        def __init__(self, name, failing):
            self.name, self.failing, self.waited = name, failing, []

        def __getitem__(self, d):
            self.waited.append(d)
            if d in self.failing:
                raise RuntimeError(f"{self.name} on device {d} failed")
            return np.full(2, d, np.float32)

    a, b = Leaf("a", {0}), Leaf("b", {0, 2})
    with pytest.raises(RuntimeError, match="^a on device 0 failed$"):  # the first, as it is
        _every_output([a, b], 3)
    assert a.waited == b.waited == [0, 1, 2]
    ok = _every_output([Leaf("c", set())], 2)
    assert [float(row[0][0]) for row in ok] == [0.0, 1.0]
