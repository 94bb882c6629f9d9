"""The compiled MPI handler (xla/ffi/mpi_native.py, mpi_sites.py): under `mpiexec -n D
xlaplug run M --engine xla` a plain all-reduce's calls after its first are served by a numba
cfunc calling MPI, with no Python in the call.  Its values are the Python handler's (the
interpreter's over MPI) bit for bit and jax's on the stacked inputs; its calls are counted
(R_TAKEN: those it took, the ones it handed back to Python included) so the tests know it
served them; a timeout and ranks that disagree, met inside it, end the run with the Python
path's own one line."""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from test_multi_device_cli import _env, _mpiexec, xlaplug

# A loop of `trips` all-reduces of v (v <- all-reduce(v) - v: bounded for every op); the
# trip count is 3 on replica 0 and `other` elsewhere (a rank that stops arriving).
LOOP = """HloModule loop, replica_count={n}

red {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] {op}(a, b)
}}

cond {{
  p = (s32[], {t}[{k}]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  id = u32[] replica-id()
  zero = u32[] constant(0)
  first = pred[] compare(id, zero), direction=EQ
  mine = s32[] constant({trips})
  theirs = s32[] constant({other})
  limit = s32[] select(first, mine, theirs)
  ROOT lt = pred[] compare(i, limit), direction=LT
}}

body {{
  p = (s32[], {t}[{k}]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = {t}[{k}] get-tuple-element(p), index=1
  r = {t}[{k}] all-reduce(v), replica_groups={groups}, to_apply=red
  w = {t}[{k}] subtract(r, v)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], {t}[{k}]) tuple(j, w)
}}

ENTRY e {{
  x = {t}[{k}] parameter(0)
  z = s32[] constant(0)
  init = (s32[], {t}[{k}]) tuple(z, x)
  w = (s32[], {t}[{k}]) while(init), condition=cond, body=body
  {root}
}}
"""
ROOT = "ROOT o = {t}[{k}] get-tuple-element(w), index=1"
# after the loop, one more all-reduce ('q'): a rank whose loop ended early meets the
# other's 'r' with it
THEN_Q = ("o = {t}[{k}] get-tuple-element(w), index=1\n"
          "  ROOT q = {t}[{k}] all-reduce(o), replica_groups={{}}, to_apply=red")


def loop(n, t, k, op="add", trips=3, other=None, root=ROOT, groups=None) -> str:
    text = "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}" \
        if groups else "{}"
    return LOOP.format(n=n, t=t, k=k, op=op, trips=trips, groups=text,
                       other=trips if other is None else other,
                       root=root.format(t=t, k=k))


# Each rank: every case's module run on the engine (repeat 2: one transport, 2 x trips
# calls a site) and on the interpreter over MPI; its outputs, and the calls the compiled
# handler served alone, saved for the test.
SCRIPT = """import sys
import ml_dtypes
import numpy as np
import xlaplug
from mpi4py import MPI
from xlaplug.xla.ffi import mpi_native
from xlaplug.xla.mpi_rewrite import mpi_handler
rank = MPI.COMM_WORLD.Get_rank()
out = {}
for name, path, dtype in [ln.split() for ln in open(sys.argv[1]).read().splitlines()]:
    dt = ml_dtypes.bfloat16 if dtype == "bf16" else np.dtype(dtype)
    exe = xlaplug.compile(open(path).read(), keep_source=True)
    k = int(path.split("_")[-1].split(".")[0])
    x = (np.random.default_rng(rank).standard_normal(k) * 50).astype(dt)
    ours = exe.run(x, engine="xla", repeat=2).outputs[0]
    newest = mpi_handler().runs[max(mpi_handler().runs)]  # (this program's binding)
    calls = 0 if newest.records is None else int(newest.records[:, mpi_native.R_TAKEN].sum())
    out[name] = (x, ours, exe.run(x).outputs[0], calls)
np.savez(sys.argv[2] + f".{rank}.npz", **{f"{n}.{i}": np.asarray(v) if i != 3 else
         np.int64(v) for n, vals in out.items() for i, v in enumerate(vals)})
"""


def _launch(tmp_path, cases: dict, n: int) -> dict:
    """{case: (stacked inputs, stacked engine outputs, stacked interpreter outputs,
    [calls served compiled, per rank])} of one mpiexec launch over every case."""
    lines = []
    for name, (text, dtype, k) in cases.items():
        path = tmp_path / f"{name}_{k}.hlo"
        path.write_text(text)
        lines.append(f"{name} {path} {dtype}")
    (tmp_path / "cases").write_text("\n".join(lines))
    script = tmp_path / "compiled.py"
    script.write_text(SCRIPT)
    p = subprocess.run([_mpiexec(), "-n", str(n), sys.executable, str(script),
                        str(tmp_path / "cases"), str(tmp_path / "got")], capture_output=True,
                       text=True, timeout=600, env=_env(), stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.stdout, p.stderr[-3000:])
    ranks = [np.load(tmp_path / f"got.{r}.npz") for r in range(n)]
    return {name: tuple(np.stack([z[f"{name}.{i}"] for z in ranks]) for i in range(4))
            for name in cases}


def _jax_loop(x, op: str, trips: int, groups=None):
    """The loop on the stacked inputs, by jax: v <- reduce(v over its group) - v."""
    import jax.numpy as jnp
    reduce = {"add": jnp.sum, "multiply": jnp.prod, "maximum": jnp.max,
              "minimum": jnp.min}[op]
    out = np.empty_like(x)
    for g in groups or [list(range(len(x)))]:
        v = jnp.asarray(x[g])
        for _ in range(trips):
            v = reduce(v, axis=0, keepdims=True) - v
        out[g] = np.asarray(v)
    return out


CASES2 = {  # (D = 2) carried with the header (<= 64 KiB), one MPI_Iallreduce (< 4 MiB),
    # one MPI_Allreduce (from 4 MiB); bf16 is no MPI type: the Python handler's
    "f32_add_small": ("float32", "add", 1024), "f32_add_posted": ("float32", "add", 65536),
    "f32_add_blocking": ("float32", "add", 1 << 20), "f64_max": ("float64", "maximum", 512),
    "f64_add_posted": ("float64", "add", 16384), "i32_add": ("int32", "add", 1000),
    "i32_multiply": ("int32", "multiply", 1000), "f32_min_posted": ("float32", "minimum", 30000),
    "bf16_add": ("bf16", "add", 256),
}
HLO_TYPES = {"float32": "f32", "float64": "f64", "int32": "s32", "bf16": "bf16"}


def _check(got: dict, cases: dict, n: int) -> None:
    trips, runs = 3, 2
    for name, (dtype, op, k, *groups) in cases.items():
        x, ours, interpreter, served = got[name]
        if dtype == "bf16":  # (npz keeps bf16 as raw 2-byte records)
            import ml_dtypes
            x, ours, interpreter = (a.view(ml_dtypes.bfloat16) for a in (x, ours, interpreter))
        assert ours.view(np.uint8).tobytes() == interpreter.view(np.uint8).tobytes(), name
        want = _jax_loop(x, op, trips, *groups)
        if dtype == "int32":
            assert np.array_equal(ours, want), name
        else:
            tol = 2e-2 if dtype == "bf16" else 1e-5
            np.testing.assert_allclose(ours.astype(np.float64), want.astype(np.float64),
                                       rtol=tol, atol=tol * 50, err_msg=name)
        if dtype == "bf16":
            assert (served == 0).all(), (name, served)
        elif k * np.dtype(dtype).itemsize >= 4 << 20:  # a new big buffer: Python's, once
            assert (served >= 1).all() and (served < runs * trips).all(), (name, served)
        else:  # every call but the first (the repeats run on one transport)
            assert (served == runs * trips - 1).all(), (name, served)


@pytest.mark.jax
@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4])
def test_compiled_all_reduce_values(tmp_path, n):
    cases = CASES2 if n == 2 else {
        **{k: CASES2[k] for k in ("f32_add_small", "f32_add_posted", "i32_add", "f64_max")},
        # two groups: each a communicator of its own
        "f32_add_pairs": ("float32", "add", 20000, [[0, 2], [1, 3]])}
    got = _launch(tmp_path, {name: (loop(n, HLO_TYPES[dt], k, op, groups=(g or [None])[0]),
                                    dt, k) for name, (dt, op, k, *g) in cases.items()}, n)
    _check(got, cases, n)


def _one_error(p) -> str:
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert p.returncode == 2 and len(errors) == 1, (p.returncode, p.stdout, p.stderr)
    return errors[0]


@pytest.mark.jax
@pytest.mark.slow
@pytest.mark.parametrize("handler", ["compiled", "python"])
def test_a_rank_that_stops_arriving_times_out_with_one_line(tmp_path, handler, monkeypatch):
    # replica 1 runs the loop twice, replica 0 three times: its third call (served by the
    # compiled handler: armed by the first) waits for a peer that finished
    if handler == "python":
        monkeypatch.setenv("XLAPLUG_MPI_HANDLER", "python")
    hlo = tmp_path / "trips.hlo"
    hlo.write_text(loop(2, "f32", 4, other=2))
    t0 = time.monotonic()
    p = xlaplug("run", hlo, "--engine", "xla", "--collective-timeout", 3, mpi=2, timeout=90)
    assert "device 0: all-reduce 'r' (call 3): device 1 did not arrive within 3 s; device 1 " \
        "finished" in _one_error(p)
    assert time.monotonic() - t0 < 45  # (a hang would run into the limit)


@pytest.mark.jax
@pytest.mark.slow
@pytest.mark.parametrize("k", [4, 65536])
def test_ranks_at_different_all_reduces_fail_with_one_line(tmp_path, k):
    # replica 1 leaves the loop after 2 calls and meets replica 0's third 'r' (compiled)
    # with 'q' (its first: Python); above 64 KiB the headers swap alone
    hlo = tmp_path / "differ.hlo"
    hlo.write_text(loop(2, "f32", k, other=2, root=THEN_Q))
    p = xlaplug("run", hlo, "--engine", "xla", "--collective-timeout", 30, mpi=2, timeout=90)
    assert "device 0: ranks disagree at collective 3 over ranks 0, 1: rank 0 has all-reduce " \
        f"'r' (call 3) f32[{k}] add, rank 1 has all-reduce 'q' (call 1) f32[{k}] add" \
        in _one_error(p)


DTYPES = [np.float32, np.float64, np.int32, np.int64]


@pytest.mark.parametrize("members", [2, 3])
@pytest.mark.parametrize("op", ["add", "multiply", "minimum", "maximum"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_cfunc_reduces_as_numpy(dtype, op, members):
    """reduce_boxes (the cfunc's reduction of the operands that came with the headers) gives
    numpy's ufunc reduction in rank order, bit for bit: NaNs, signed zeros, wrap-around."""
    from xlaplug.backends.spmd.mpi_allreduce import UFUNCS
    from xlaplug.xla.ffi import mpi_native as N
    g = np.random.default_rng(members)
    if np.dtype(dtype).kind == "f":
        special = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0], dtype)
        vals = [np.concatenate([g.permutation(special), g.standard_normal(57).astype(dtype)])
                for _ in range(members)]
    else:
        info = np.iinfo(dtype)
        vals = [np.concatenate([np.array([info.max, info.min, -1, 0], dtype),
                                g.integers(info.min, info.max, 61, dtype=dtype)])
                for _ in range(members)]
    boxes = [np.zeros(N.HEADER_BYTES + v.nbytes, np.uint8) for v in vals]
    for b, v in zip(boxes, vals):
        b[N.HEADER_BYTES:] = v.view(np.uint8)
    out = np.empty_like(vals[0])
    N.reduce_boxes(out, np.array([b.ctypes.data for b in boxes], np.int64), members,
                   {"add": N.ADD, "multiply": N.MULTIPLY, "minimum": N.MINIMUM,
                    "maximum": N.MAXIMUM}[op])
    with np.errstate(all="ignore"):
        want = UFUNCS[op](vals[0], vals[1])
        for v in vals[2:]:
            want = UFUNCS[op](want, v)
    assert out.tobytes() == want.tobytes()
