"""`--engine xla` errors point at the user's file: the engine reads the module's text as read
(Executable.source_text), not the module reprinted -- whose lines differ wherever the file
has comments, blank lines or its own spacing -- so `FILE:LINE:COL: error: ...` and the
line and caret after it are the file's, on one device, on many (checked before the worker
process gets the module) and with `--replicas` changing the header."""
import json

import pytest
from click.testing import CliRunner

pytest.importorskip("jax")

import xlaplug  # noqa: E402
from xlaplug.cli import main  # noqa: E402

pytestmark = pytest.mark.jax

PLUGIN = '''
import numpy as np
from xlaplug.plugin import Plugin
plugin = Plugin("pos", version="1")

@plugin.shape("pos.swish")
def shape(x):
    return x

@plugin.kernel("pos.swish", device="cpu")
def swish(x, out):
    out[...] = x / (1 + np.exp(-x))
'''

# The reprint puts `y` on line 5 (no comments, no blank lines): here it is on line 13.
BAD = '''// a module with comments
HloModule pos


// the entry


ENTRY e {
  // its input
  x = f32[4,6] parameter(0)


  ROOT   y = f32[4,6] custom-call(x), custom_call_target="pos.swish", api_version=API_VERSION_STATUS_RETURNING
}
'''
LINE = BAD.splitlines()[12]
WANT = ("{m}:13:10: error: custom-call 'y': api_version=API_VERSION_STATUS_RETURNING; the XLA "
        "engine serves plugin ops as API_VERSION_TYPED_FFI calls")


@pytest.fixture(scope="module")
def plugins_dir(tmp_path_factory):
    """One plugin file for the module: XLA keeps an FFI target for the life of the process
    (there is no unregistering), and the same op from another file is refused by name."""
    d = tmp_path_factory.mktemp("plugins")
    (d / "pos.py").write_text(PLUGIN)
    return d


@pytest.fixture
def setup(tmp_path, plugins_dir):
    def made():
        m = tmp_path / "bad.hlo"
        m.write_text(BAD)
        return plugins_dir, m
    return made


@pytest.mark.parametrize("devices", [[], ["--replicas", "2"]])
def test_an_engine_error_points_at_the_files_line(setup, devices):
    d, m = setup()
    r = CliRunner().invoke(main, ["run", str(m), "--plugins-dir", str(d), "--engine", "xla",
                                  *devices])
    assert r.exit_code == 2, r.output
    assert r.output.splitlines() == [WANT.format(m=m), LINE, " " * 9 + "^"], r.output


def test_the_kept_text_is_the_files_with_the_header_the_run_sets(setup):
    d, m = setup()
    good = BAD.replace(", api_version=API_VERSION_STATUS_RETURNING", "")
    m.write_text(good)
    assert xlaplug.compile(str(m), plugins=[str(d)], keep_source=True).source_text == good
    exe = xlaplug.compile(str(m), plugins=[str(d)], keep_source=True, replicas=2)
    assert exe.source_text == good.replace("HloModule pos\n", "HloModule pos, replica_count=2\n")
    r = CliRunner().invoke(main, ["run", str(m), "--plugins-dir", str(d), "--engine", "xla",
                                  "--replicas", "2", "--seed", "1", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["replicas"] == 2 and len(got["devices"]) == 2
