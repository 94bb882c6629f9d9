"""Start-up: a process imports what its work needs, when it needs it (issue 23 item 6).

Each check runs the CLI in a fresh interpreter (`python -c`) and reads `sys.modules` after
it: parsing, verifying and printing a module loads no numba, jax or scipy (the bundled
example plugin's @njit kernel is made on its first call), and a run that finds its fused
loop in the JIT cache loads the machine code without numba's lowering registries (which
import numba.np.arraymath and scipy.linalg: 0.25 s).
"""
import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_in_process import xlaplug_in_process

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "mlp.hlo"

# Run the CLI, then print which of the heavy modules the process holds and the exit status.
PROBE = """
import sys
from xlaplug.cli.main import main
try:
    main({args!r})
except SystemExit as e:
    code = e.code
heavy = ["numba", "numba.np.arraymath", "jax", "jaxlib", "scipy", "scipy.linalg", "mpi4py",
         "lark", "importlib.metadata", "xlaplug.passes.loop_fusion", "xlaplug.runtime.run_paths"]
print({{"exit": code, "loaded": [m for m in heavy if m in sys.modules]}}, file=sys.stderr)
"""


def _probe(args: list[str], cache: Path) -> dict:
    env = {**os.environ, "XLAPLUG_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)
    return ast.literal_eval(proc.stderr.strip().splitlines()[-1])


def test_compile_without_passes_loads_no_numba_jax_or_scipy(tmp_path):
    got = _probe(["compile", "--passes", "none", str(MLP), "-o", str(tmp_path / "out.hlo")],
                 tmp_path / "cache")
    assert got == {"exit": 0, "loaded": []}
    assert "ENTRY main.3" in (tmp_path / "out.hlo").read_text()


def test_lark_reads_only_text_off_the_common_path(tmp_path):
    """A module as jax prints it is read without lark (compile above loads none); a text
    the common path does not take -- here a malformed one -- is read by lark, which gives
    the diagnostic."""
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] "
                   "add(p p)\n}\n")
    proc = subprocess.run([sys.executable, "-m", "xlaplug", "compile", str(bad)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "XLAPLUG_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{bad}:4:")
    got = _probe(["compile", str(bad)], tmp_path / "cache")
    assert got == {"exit": 2, "loaded": ["lark"]}


def test_entry_points_are_read_only_where_a_distribution_may_declare_them(tmp_path,
                                                                         monkeypatch):
    """importlib.metadata is imported (above: not by compile) only when a distribution on
    sys.path may declare an `xlaplug.plugins` entry point -- in the files it reads -- or the
    path holds what the quick search does not read (a zip archive)."""
    import importlib
    from importlib.metadata import entry_points

    from xlaplug.plugin.loader import ENTRY_POINT_GROUP, entry_points_declared

    def declared() -> bool:  # and importlib.metadata finds what the search finds
        importlib.invalidate_caches()
        found = entry_points_declared()
        assert found == bool(entry_points(group=ENTRY_POINT_GROUP))
        return found

    def dist(d, name: str):
        d.mkdir(parents=True, exist_ok=True)
        meta = "METADATA" if d.name.endswith(".dist-info") else "PKG-INFO"
        (d / meta).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        return d

    site = tmp_path / "site"
    (dist(site / "other-1.0.dist-info", "other") / "entry_points.txt").write_text(
        "[console_scripts]\nother = other:main\n")
    dist(site / "bare-1.0.dist-info", "bare")  # no entry_points.txt
    egg = tmp_path / "acme-1.0.egg"  # an .egg folder on the path: its EGG-INFO is read
    dist(egg / "EGG-INFO", "acme")
    monkeypatch.setattr(sys, "path", [str(site), str(egg), str(tmp_path / "absent")])
    assert not declared()
    for d, name in ((site / "one-1.0.dist-info", "one"), (site / "two.egg-info", "two"),
                    (egg / "EGG-INFO", "acme")):
        (dist(d, name) / "entry_points.txt").write_text(
            "[xlaplug.plugins]\nacme = acme:plugin\n")
        assert declared(), d
        (d / "entry_points.txt").unlink()
    assert not declared()
    archive = tmp_path / "lib.zip"
    archive.write_bytes(b"PK")
    monkeypatch.setattr(sys, "path", [str(site), str(archive)])
    assert entry_points_declared()


def test_list_plugins_loads_no_numba(tmp_path):
    got = _probe(["list-plugins"], tmp_path / "cache")
    assert got["exit"] == 0
    assert "numba" not in got["loaded"]


def test_warm_run_loads_cached_kernels_without_numbas_registries(tmp_path):
    cache = tmp_path / "cache"
    cold = _probe(["run", str(MLP)], cache)  # compiles the fused loop and caches it
    assert cold["exit"] == 0 and "numba" in cold["loaded"]
    warm = _probe(["run", str(MLP), "--out", str(tmp_path / "warm.npz")], cache)
    assert warm["exit"] == 0
    assert "numba" in warm["loaded"]  # the fused loop is numba's machine code
    assert "numba.np.arraymath" not in warm["loaded"]
    assert "scipy.linalg" not in warm["loaded"]
    # ... and gives what the interpreter gives without compiled loops (what it imports is
    # not the question here: in this process, tests/cli_in_process.py).
    ref = xlaplug_in_process("run", MLP, "--interpret", "--out", tmp_path / "ref.npz")
    assert ref.returncode == 0, ref.stderr
    with np.load(tmp_path / "warm.npz") as a, np.load(tmp_path / "ref.npz") as b:
        np.testing.assert_allclose(a["out0"], b["out0"], rtol=1e-6, atol=1e-7)


def test_the_example_plugins_kernel_is_made_on_its_first_call():
    from xlaplug.backends.cpu.jit_store import DeferredKernel, resolved
    from xlaplug.runtime.check import check_plugins
    from xlaplug.runtime.executable import load_session

    session = load_session()
    entry = session.registry.kernel_for("example.rms_norm", "cpu")
    assert isinstance(entry.fn, DeferredKernel)
    assert type(resolved(entry.fn)).__name__ == "CPUDispatcher"
    assert resolved(entry.fn) is entry.fn.dispatcher()  # made once
    # The deferred kernel holds against its decomposition, as any kernel does.
    results = check_plugins(session, ["example.rms_norm"], trials=1)
    assert len(results) == 3 and all(r.ok for r in results), results


KINDS = '''
import numba
import numpy as np
import pytest
from xlaplug.backends.cpu.jit_store import cached_njit


@cached_njit
def containers(a):  # typed dict and set (hashing: the hash secret), LAPACK, numpy's rng
    d = dict()
    d[1.5] = 1
    for x in a:
        d[x] = d[x] + 1 if x in d else 1
    return (len(d) + len(set(a)) + hash((1.5, 3)) % 7
            + np.sum(np.linalg.inv(np.eye(2) * 2.0)) + np.random.rand() * 0)


@cached_njit(parallel=True)
def threads(a):  # a parfor: numba's thread pool started through reload_init
    t = 0.0
    for i in numba.prange(a.shape[0]):
        t += np.exp(a[i])
    return t
'''


def test_cached_code_of_every_runtime_kind_links_without_the_registries(tmp_path):
    """Machine code calling numba's runtime (NRT), its C helpers (dict, set, LAPACK, rng),
    the hash secret and its thread pool, loaded from the cache in a fresh process: the same
    values as when it was compiled, from the cache (a parfor's reload imports numba's
    parallel machinery, and with it the registries: only the link is checked here)."""
    (tmp_path / "kinds.py").write_text(KINDS)
    env = {**os.environ, "XLAPLUG_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    code = ("import numpy as np, kinds\n"
            "a = np.arange(10.0) % 3\n"
            "v = (kinds.containers(a), kinds.threads(np.ones(1000)), "
            "float(kinds.containers.py_func(a)))\n"
            "hits = (sum(kinds.containers.stats.cache_hits.values()), "
            "sum(kinds.threads.stats.cache_hits.values()))\n"
            "print(repr((v, hits)))")
    runs = [ast.literal_eval(subprocess.run([sys.executable, "-W", "ignore", "-c", code],
                                            capture_output=True, text=True, env=env, check=True,
                                            cwd=tmp_path, timeout=600).stdout.strip())
            for _ in range(2)]
    (cold_values, cold_hits), (warm_values, warm_hits) = runs
    assert cold_hits == (0, 0) and warm_hits == (1, 1)
    assert warm_values == cold_values
    assert cold_values[0] == cold_values[2]  # as the plain Python function gives it
    assert cold_values[1] == pytest.approx(1000 * np.e)
