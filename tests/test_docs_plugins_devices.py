"""docs/plugins.md, section "Many devices": the multi-device plugin (`acme.sync_norm`)
taken from the document's code blocks, checked with `check-plugins --devices 4`, run on four
threads with its kernel and its decomposition, under mpiexec, and inside a jax shard_map
program against XLA (`--reference xla`), as the document shows."""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_docs_plugins import DOC, ROOT, code_blocks, xlaplug

jax = pytest.importorskip("jax")  # noqa: F841 - marks the file `jax` (conftest)


def saved_modules() -> dict[str, str]:
    """The HLO modules the document asks to save (`Save this module as `FILE`:`), by name."""
    found = re.finditer(r"Save this module as `(\S+)`:\n\n```\n(.*?)```", DOC.read_text(), re.S)
    return {m.group(1): m.group(2) for m in found}


def _sync_norm_dir(tmp_path: Path) -> Path:
    (tmp_path / "plugins").mkdir(mode=0o755)
    (tmp_path / "plugins" / "acme_sync_norm.py").write_text(
        code_blocks()["plugins/acme_sync_norm.py"])
    (tmp_path / "sync_norm.hlo").write_text(saved_modules()["sync_norm.hlo"])
    return tmp_path


@pytest.fixture(scope="module")
def kernel_run(tmp_path_factory):
    """The document's `xlaplug run sync_norm.hlo ... --out kernel.npz`, run once for both
    tests (each took the same outputs from the same command): (its result, kernel.npz)."""
    d = _sync_norm_dir(tmp_path_factory.mktemp("kernel_run"))
    r = xlaplug("xlaplug run sync_norm.hlo --plugins-dir plugins --replicas 4 --out kernel.npz",
                d)
    return r, d / "kernel.npz"


@pytest.mark.slow
def test_many_devices_section_threads(tmp_path, kernel_run):
    """The multi-device plugin: check-plugins --devices 4, and the module on 4 threads with
    the kernel (its communicator) and with the decomposition (b.num_devices, channel ids,
    replica groups) giving the same outputs."""
    _sync_norm_dir(tmp_path)
    r = xlaplug("xlaplug check-plugins --devices 4 --plugins-dir plugins acme.sync_norm",
                tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("kernel matches decomposition on 4 devices") == 1, r.stdout
    assert r.stdout.splitlines()[-1] == "1 op checked (6 checks): all ok", r.stdout
    assert "`kernel matches decomposition on 4 devices`" in DOC.read_text()
    r, kernel = kernel_run
    assert r.returncode == 0, r.stderr
    shutil.copy(kernel, tmp_path / "kernel.npz")
    out = np.load(tmp_path / "kernel.npz")["out0"]
    assert out.shape == (4, 8, 3) and out.dtype == np.float32
    # normalized over all 32 rows: each column's mean 0 and variance 1 over every device's
    # rows together, though not over any one device's 8 (a kernel that reduced over its own
    # rows only would give 0 there)
    every = out.reshape(32, 3)
    np.testing.assert_allclose(every.mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(every.var(axis=0), 1, atol=1e-4)
    assert np.abs(out.mean(axis=1)).max() > 1e-2
    r = xlaplug("xlaplug run sync_norm.hlo --plugins-dir plugins --replicas 4 --prefer "
                "decomposition --expect kernel.npz", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the output of 4 devices matches kernel.npz" in r.stdout


@pytest.mark.slow
def test_many_devices_section_mpi_and_jax(tmp_path, kernel_run):
    """The same plugin under mpiexec, one process per device, and inside a jax shard_map
    program against XLA partitioning it (`--reference xla`): the table the document shows."""
    _sync_norm_dir(tmp_path)
    text = DOC.read_text()
    r, kernel = kernel_run
    assert r.returncode == 0, r.stderr
    shutil.copy(kernel, tmp_path / "kernel.npz")
    env = {k: v for k, v in os.environ.items() if k not in ("XLAPLUG_PLUGIN_PATH", "XLA_FLAGS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = ("mpiexec -n 4 xlaplug run sync_norm.hlo --plugins-dir plugins --replicas 4 "
               "--expect kernel.npz")
    assert f"$ {command}\n" in text
    mpiexec = Path(sys.executable).with_name("mpiexec")
    if mpiexec.exists():
        argv = shlex.split(command)
        mpi = subprocess.run([str(mpiexec), *argv[1:3], sys.executable, "-m", "xlaplug.cli",
                              *argv[4:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120)
        assert mpi.returncode == 0, mpi.stdout + mpi.stderr
        assert "the output of 4 devices matches kernel.npz" in mpi.stdout
    # jax makes the shard_map program on 4 host devices: in a process of its own, since the
    # count is fixed when jax starts
    (tmp_path / "sync_norm_jax.py").write_text(code_blocks()["sync_norm_jax.py"])
    made = subprocess.run([sys.executable, "sync_norm_jax.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert "xla.sdy.manual_computation_body" in (tmp_path / "sync_norm_jax.hlo").read_text()
    r = xlaplug("xlaplug run sync_norm_jax.hlo --plugins-dir plugins --inputs batch.npz "
                "--reference xla", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = re.search(r"sync_norm_jax\.hlo --plugins-dir plugins --inputs batch\.npz "
                      r"--reference xla\n(.*?)```", text, re.S).group(1)
    assert [ln.rstrip() for ln in r.stdout.strip().splitlines()] == \
        [ln.rstrip() for ln in shown.strip().splitlines()]
    if not mpiexec.exists():
        pytest.skip("no mpiexec next to python: pip install 'xlaplug[mpi]'")
