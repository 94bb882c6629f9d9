"""Inputs are checked, never guessed: `xlaplug run --inputs` and the Python API refuse a key
that names no parameter, a parameter the file lacks (unless a seed is given, which draws
it), and a dtype or shape that differs from the parameter's -- one line naming the
parameter, what it takes and what it got; `--cast` (`cast=True`) converts dtypes on
purpose; ml_dtypes arrays that npz stored as raw bytes are read as their type.  The
commands run in this process (tests/cli_in_process.py): their exit status, stdout and
stderr line are the subject, not the process around them."""
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import xlaplug
from cli_in_process import xlaplug_in_process
from xlaplug.runtime.options import RunError

ROOT = Path(__file__).resolve().parents[1]

ADD = """HloModule m
ENTRY e {
  x = f32[3]{0} parameter(0)
  y = f32[3]{0} parameter(1)
  ROOT a = f32[3]{0} add(x, y)
}
"""
X = np.array([1.0, 2.0, 3.0], np.float32)
Y = np.array([0.5, 0.25, 0.125], np.float32)


def run(*args):
    return xlaplug_in_process("run", *args, cwd=ROOT)


def one_line(r, code=2) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    return r.stderr.strip()


@pytest.fixture
def add(tmp_path):
    p = tmp_path / "add.hlo"
    p.write_text(ADD)
    return p


def test_a_misnamed_key_is_an_error_listing_the_expected_ones(add, tmp_path):
    # Before: `x` was ignored and both parameters ran on seeded random values.
    np.savez(tmp_path / "in.npz", x=X, in1=Y)
    assert one_line(run(add, "--inputs", tmp_path / "in.npz")) == (
        f"{add}: error: unknown input key 'x': the keys it takes are in0, in1 (one per "
        "parameter, in order)")
    np.savez(tmp_path / "extra.npz", in0=X, in1=Y, in2=Y, bias=Y)
    assert "unknown input keys 'in2', 'bias': the keys it takes are in0, in1" in \
        one_line(run(add, "--inputs", tmp_path / "extra.npz"))


def test_a_missing_parameter_is_drawn_only_with_an_explicit_seed(add, tmp_path):
    np.savez(tmp_path / "in.npz", in0=X)
    assert one_line(run(add, "--inputs", tmp_path / "in.npz")) == (
        f"{add}: error: no input for in1 (parameter 'y', f32[3]): give every parameter, or a "
        "seed (--seed, seed= in the API) to draw the missing ones at random")
    r = run(add, "--inputs", tmp_path / "in.npz", "--seed", 0, "--out", tmp_path / "o.npz")
    assert r.returncode == 0, r.stderr
    drawn = np.load(tmp_path / "o.npz")["out0"] - X
    assert drawn.dtype == np.float32 and not np.array_equal(drawn, Y)


def test_a_dtype_that_differs_is_an_error_and_cast_converts_it(add, tmp_path):
    np.savez(tmp_path / "in.npz", in0=X.astype(np.float64), in1=Y)
    assert one_line(run(add, "--inputs", tmp_path / "in.npz")) == (
        f"{add}: error: input in0 for parameter 'x' is f64[3]; the parameter is f32[3] "
        "(--cast, or cast=True in the API, converts it)")
    r = run(add, "--inputs", tmp_path / "in.npz", "--cast", "--out", tmp_path / "o.npz")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["out0"], X + Y)
    # a cast that would drop a part is no cast
    np.savez(tmp_path / "c.npz", in0=X.astype(np.complex64), in1=Y)
    assert one_line(run(add, "--inputs", tmp_path / "c.npz", "--cast")).endswith(
        "input in0 for parameter 'x' is c64[3]; the parameter is f32[3] (no cast converts it: "
        "a complex value would lose its imaginary part)")


def test_a_shape_that_differs_is_an_error_naming_both(add, tmp_path):
    np.savez(tmp_path / "in.npz", in0=X, in1=np.zeros((3, 1), np.float32))
    assert one_line(run(add, "--inputs", tmp_path / "in.npz", "--cast")) == (
        f"{add}: error: input in1 for parameter 'y' is f32[3,1]; the parameter is f32[3]")


def test_bf16_stored_by_npz_as_raw_bytes_is_read_as_bf16(tmp_path):
    """np.savez keeps an ml_dtypes array's bytes under a void dtype: reading them back as
    the parameter's bf16 is a view of the same bits, no cast."""
    hlo = tmp_path / "b.hlo"
    hlo.write_text("HloModule m\nENTRY e {\n  x = bf16[4]{0} parameter(0)\n"
                   "  ROOT n = bf16[4]{0} negate(x)\n}\n")
    x = np.array([1.5, -2.0, 0.1, 3.0], ml_dtypes.bfloat16)
    np.savez(tmp_path / "in.npz", in0=x)
    assert np.load(tmp_path / "in.npz")["in0"].dtype.kind == "V"
    r = run(hlo, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "o.npz")
    assert r.returncode == 0, r.stderr
    out = np.load(tmp_path / "o.npz")["out0"].view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(np.uint16), (-x).view(np.uint16))


def test_the_api_checks_the_same_things_with_the_same_text(add):
    exe = xlaplug.compile(str(add))
    np.testing.assert_array_equal(exe(X, Y)[0], X + Y)
    with pytest.raises(RunError) as e:
        exe(X.astype(np.float64), Y)
    assert e.value.message == ("input in0 for parameter 'x' is f64[3]; the parameter is f32[3] "
                               "(--cast, or cast=True in the API, converts it)")
    np.testing.assert_array_equal(exe.run(X.astype(np.float64), Y, cast=True).outputs[0], X + Y)
    with pytest.raises(RunError, match=r"error: unknown input key 'x': the keys it takes are in0, in1"):
        exe.run(inputs={"x": X, "in1": Y})
    with pytest.raises(RunError, match=r"error: no input for in1 \(parameter 'y', f32\[3\]\)"):
        exe.run(inputs={"in0": X})
    assert exe.run(inputs={"in0": X}, seed=0).outputs[0].dtype == np.float32
    with pytest.raises(RunError, match=r"error: input in1 for parameter 'y' is f32\[4\]; the "
                                       r"parameter is f32\[3\]$"):
        exe(X, np.zeros(4, np.float32))


def test_python_scalars_take_the_parameters_dtype_as_in_jax():
    """A Python number carries no precision (jax: weakly typed); a numpy f64 scalar does."""
    exe = xlaplug.compile("HloModule m\nENTRY e {\n  x = f32[] parameter(0)\n"
                          "  ROOT n = f32[] negate(x)\n}\n")
    (y,) = exe(2.5)
    assert y.dtype == np.float32 and y == -2.5
    with pytest.raises(RunError, match=r"is f64\[\]; the parameter is f32\[\]"):
        exe(np.float64(2.5))
    with pytest.raises(RunError, match=r"is c128\[\]; the parameter is f32\[\]"):
        exe(1j)


def test_many_devices_name_the_stacked_shape():
    step = xlaplug.compile(str(ROOT / "examples" / "horovod_allreduce4.hlo"))
    w = np.ones(1024, np.float32)
    with pytest.raises(RunError) as e:
        step(w, np.ones((3, 1024), np.float32))
    assert e.value.message == (
        "input in1 for parameter 'grad' is f32[3,1024]; the parameter is f32[1024]: give "
        "f32[1024] (every device gets it) or f32[4,1024] (stacked: one per device, 4 devices)")
    with pytest.raises(RunError, match=r"is f64\[4,1024\]; the parameter is f32\[1024\]: give "
                                       r"f32\[1024\] .* or f32\[4,1024\] .*--cast"):
        step(w, np.ones((4, 1024)))


def test_one_file_holds_the_inputs_and_the_expected_outputs(add, tmp_path):
    """Its outK keys are the expected outputs, not unknown inputs, whether it is named by
    --expect alone or by both --inputs and --expect."""
    np.savez(tmp_path / "both.npz", in0=X, in1=Y, out0=X + Y)
    for args in (["--expect", tmp_path / "both.npz"],
                 ["--inputs", tmp_path / "both.npz", "--expect", tmp_path / "both.npz"]):
        r = run(add, *args)
        assert r.returncode == 0 and f"the output matches {tmp_path / 'both.npz'}" in r.stdout, \
            r.stdout + r.stderr
