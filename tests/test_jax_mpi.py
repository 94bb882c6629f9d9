"""xlaplug.jax.op under mpiexec (issue 25): the Horovod ops run their MPI kernels inside XLA
in plain jax.jit code, several in one jit, with gradients (the decomposition's VJP, its
collectives transposed over MPI), and a peer that never comes ends in one error within the
timeout; xlaplug.jax.jit(engine="xla") takes part in the collectives too (issue 22).  One
mpiexec run of tests/jax_mpi_program.py per rank count; the oracle is jax on one process,
the same math on the stacked per-rank inputs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jax_mpi_program import inputs
from test_multi_device_cli import _env, _mpiexec

pytest.importorskip("jax")
pytestmark = [pytest.mark.jax, pytest.mark.slow]
PROGRAM = Path(__file__).with_name("jax_mpi_program.py")


def _run(tmp_path, d: int, *more) -> list[dict]:
    out = tmp_path / f"ranks{d}"
    p = subprocess.run([_mpiexec(), "-n", str(d), sys.executable, str(PROGRAM), str(out), *more],
                       capture_output=True, text=True, timeout=240, env=_env(),
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return [dict(np.load(f"{out}.{r}.npz")) for r in range(d)]


def _want(d: int) -> dict:
    """Every rank's expected values, computed by jax from the stacked inputs."""
    import jax
    import jax.numpy as jnp
    x, w, k = inputs(d)
    rows = x.shape[1] // d
    total = jnp.sum(x, 0)
    per_rank = {
        "sum": [total] * d, "average": [total / d] * d, "max": [jnp.max(k, 0)] * d,
        "allgather": [jnp.concatenate(list(x), 0)] * d,
        "reducescatter": [total[r * rows:(r + 1) * rows] for r in range(d)],
        "alltoall": [jnp.concatenate([x[s, r * rows:(r + 1) * rows] for s in range(d)], 0)
                     for r in range(d)],
        "broadcast": [x[d - 1]] * d}

    def global_loss(xs):  # every rank's loss, summed: its gradient is each rank's
        ar, ag = jnp.sum(xs, 0), jnp.concatenate(list(xs * xs), 0)
        return sum((ar * w[r]).sum() + (ag[:xs.shape[1]] * 0.5 + ag.sum() * 0.25).sum()
                   for r in range(d))

    def scatter_loss(xs):
        mean = jnp.mean(xs, 0)
        return sum((mean[r * rows:(r + 1) * rows] * w[r, :rows]).sum() for r in range(d))
    grad, grad_rs = jax.grad(global_loss)(x), jax.grad(scatter_loss)(x)
    per_rank["grad"] = list(grad)
    per_rank["grad_eager"] = list(grad_rs)
    per_rank["jit_engine"] = [total * 2] * d
    looped = x
    for _ in range(3):
        looped = jnp.broadcast_to(jnp.mean(looped, 0), x.shape) + 1.0
    per_rank["loop"], per_rank["branch"] = list(looped), [jnp.max(x, 0)] * d
    per_rank["vmap"] = [jnp.stack([total, 2 * total])] * d
    return per_rank


def _check(got: list[dict], want: dict, keys) -> None:
    for key in keys:
        for r, mine in enumerate(got):
            expected = np.asarray(want[key][r])
            assert mine[key].shape == expected.shape and mine[key].dtype == expected.dtype, \
                (key, r, mine[key].dtype, expected.dtype)
            np.testing.assert_allclose(mine[key], expected, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{key} rank {r}")


VALUES = ("sum", "average", "max", "allgather", "reducescatter", "alltoall", "broadcast")


def test_two_ranks_values_gradients_engine_and_timeout(tmp_path):
    got = _run(tmp_path, 2)
    _check(got, _want(2), VALUES + ("grad", "grad_eager", "jit_engine", "loop",
                                         "branch", "vmap"))
    message, took = str(got[0]["timeout_error"]), float(got[0]["timeout_s"])
    assert "xlaplug.mpi:" in message and "did not arrive within 1 s" in message, message
    line = message[message.index("xlaplug.mpi:"):]
    assert "\n" not in line, message  # the transport's one line, as jax raises it
    assert took < 30, took  # not a timing test: a hang would run into the limit


def test_four_ranks_values(tmp_path):
    _check(_run(tmp_path, 4, "--quick"), _want(4), VALUES)
