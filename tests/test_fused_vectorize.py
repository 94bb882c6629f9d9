"""The CPU fused loop (cpu/fused_loop.py) compiles to packed vector code.

A fused elementwise loop only pays off when LLVM vectorizes it: one scalar helper left as a
call (too big to inline), a branch it cannot turn into a select, or an allocation (a bit
view through a one-element array) keeps the whole loop scalar -- 10-60x slower, measured.
These tests read the code numba produced for small f32 fusions -- packed single-precision
FMAs on 256/512-bit registers in the machine code, and in the LLVM IR no helper left as a call,
no per-lane libm call (a vector `llvm.exp.v8f64` becomes eight scalar exp calls) and no per-lane
table gather -- for a multiply-add chain, and for one through XLA's exp and tanh approximations
(the heaviest helpers), flush-to-zero and max.
Whether the values are XLA's is tests/test_loop_fusion.py's and test_elementwise.py's job.
"""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from xlaplug.backends.common.fusion_contents import loop_shape
from xlaplug.backends.cpu.fused_loop import compiled_loop_fn
from xlaplug.hlo import parse_module

_FEATURES = llvm.get_host_cpu_features()
pytestmark = pytest.mark.skipif(
    not (_FEATURES.get("avx2") and _FEATURES.get("fma")),
    reason="this CPU has no AVX2/FMA: there are no packed ymm/zmm FMA instructions to find")

_PACKED_FMA = re.compile(r"\bvfn?m(add|sub)\d{3}ps\s+[^\n]*%[yz]mm")


def _fused_code(body: str, monkeypatch) -> tuple[str, str]:
    """(machine code, LLVM IR) of the compiled loop of fusion `body` (f32[4096] parameters p0..p2),
    compiled in memory (numba keeps no assembly for code loaded from its disk cache)."""
    monkeypatch.setenv("XLAPLUG_JIT_CACHE", "0")
    text = ("HloModule vec\n\nfused {\n"
            "  p0 = f32[4096] parameter(0)\n  p1 = f32[4096] parameter(1)\n"
            "  p2 = f32[4096] parameter(2)\n" + body +
            "}\n\nENTRY main {\n  a = f32[4096] parameter(0)\n  b = f32[4096] parameter(1)\n"
            "  c = f32[4096] parameter(2)\n"
            "  ROOT f = f32[4096] fusion(a, b, c), kind=kLoop, calls=fused\n}\n")
    comp = next(c for c in parse_module(text).computations if c.name == "fused")
    fn = compiled_loop_fn(comp, tuple(loop_shape(comp)))
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    fn(np.empty(4096, np.float32), x, x[::-1].copy(), x)
    sig = fn.signatures[0]
    return fn.inspect_asm(sig), fn.inspect_llvm(sig)


def _scalar_residue(ir: str) -> list[str]:
    """What in the IR keeps lanes apart: calls to xlaplug helpers (not inlined), vector
    libm intrinsics (scalarized into one call per lane), gathers, scalar libm calls (erf,
    powf: one per element)."""
    return sorted(set(re.findall(r"call [^@\n]*@(_ZN\d*xlaplug\w+|llvm\.(?:exp|exp2|log|log2|pow|"
                                 r"sin|cos|tanh)\.v\w+|llvm\.masked\.gather\.\w+|"
                                 r"(?:erf|pow|exp|log|tanh|sin|cos)f?\b)", ir)))


def test_multiply_add_chain_is_packed_fma(monkeypatch):
    asm, ir = _fused_code("  m = f32[4096] multiply(p0, p1)\n"
                     "  s = f32[4096] add(m, p2)\n"
                     "  k = f32[] constant(0.75)\n  kb = f32[4096] broadcast(k), dimensions={}\n"
                     "  ROOT r = f32[4096] multiply(s, kb)\n", monkeypatch)
    assert _PACKED_FMA.search(asm), "no packed FMA in the fused multiply-add loop"
    assert not _scalar_residue(ir)


def test_exp_tanh_max_chain_is_packed(monkeypatch):
    """exp and tanh are XLA's polynomial approximations (scalar_float_approx32.py): written as
    selects and inlined into the loop, they vectorize with the rest of the chain."""
    asm, ir = _fused_code("  e = f32[4096] exponential(p0)\n  t = f32[4096] tanh(p1)\n"
                     "  x = f32[4096] maximum(p2, e)\n  m = f32[4096] multiply(t, x)\n"
                     "  ROOT r = f32[4096] add(m, p0)\n", monkeypatch)
    assert _PACKED_FMA.search(asm), "no packed FMA: the exp/tanh polynomials ran scalar"
    assert re.search(r"@llvm\.fma\.v(8|16)f32", ir), "no 8- or 16-lane FMA in the IR"
    assert not _scalar_residue(ir), "lanes computed one at a time"


@pytest.mark.parametrize("op", ["log", "logistic", "log-plus-one", "exponential-minus-one",
                                "erf"])
def test_f32_transcendental_is_packed(op, monkeypatch):
    """XLA's f32 log, logistic, log1p, expm1 and erf (scalar_float_approx32.py) are selects,
    not early returns, and inlined: each alone in a loop runs in 8/16 lanes."""
    asm, ir = _fused_code(f"  ROOT r = f32[4096] {op}(p0)\n", monkeypatch)
    assert re.search(r"@llvm\.fma\.v(8|16)f32", ir), f"no 8- or 16-lane FMA: {op} ran scalar"
    assert not _scalar_residue(ir), "lanes computed one at a time"


def _loop_ir(text: str, monkeypatch, **kw) -> str:
    """LLVM IR of the compiled loop of the fusion `fused` in module `text`, run once on
    f32 operands of its parameters' sizes (out a fresh array; `inplace`: parameter 0 is
    out)."""
    monkeypatch.setenv("XLAPLUG_JIT_CACHE", "0")
    comp = next(c for c in parse_module(text).computations if c.name == "fused")
    fn = compiled_loop_fn(comp, tuple(loop_shape(comp)), **kw)
    n = comp.root.shape.num_elements()
    xs = [np.linspace(-2, 2, p.shape.num_elements(), dtype=np.float32) for p in comp.parameters]
    fn(xs[0] if kw.get("inplace") else np.empty(n, np.float32), *xs)
    return fn.inspect_llvm(fn.signatures[0])


_BIAS_GELU = """HloModule bias
fused {
  p0 = f32[64,1024] parameter(0)
  p1 = f32[1024] parameter(1)
  b = f32[64,1024] broadcast(p1), dimensions={1}
  s = f32[64,1024] add(p0, b)
  t = f32[64,1024] tanh(s)
  ROOT m = f32[64,1024] multiply(s, t)
}
ENTRY main {
  x = f32[64,1024] parameter(0)
  v = f32[1024] parameter(1)
  ROOT f = f32[64,1024] fusion(x, v), kind=kLoop, calls=fused
}
"""


def test_rows_on_threads_read_slices_not_gathers(monkeypatch):
    """A loop with a broadcast operand runs over rows (fused_loop.row_split); on numba's
    threads (prange) its operands are sliced per row: indexed at r * row + j the parfor
    body gathered and scattered lane by lane (the bf16 GELU of issue 23: 4.2 ms a run on
    one thread against 2.5)."""
    ir = _loop_ir(_BIAS_GELU, monkeypatch)
    assert re.search(r"@llvm\.fma\.v(8|16)f32", ir), "the row loop ran scalar"
    assert not re.search(r"llvm\.masked\.(gather|scatter)", ir), "lanes gathered one by one"


def test_epilogue_in_place_has_no_overlap_check(monkeypatch):
    """In place (a product's epilogue writing the product: parameter 0 is `out`), the loop
    reads and writes one array: LLVM checks no distance between the two, a check that two
    pointers to the same memory always fail (the loop then ran its scalar form: the bf16
    GELU 61 ms a run on one thread against 2.4).  The bias still gets its overlap check."""
    assert "diff.check" in _loop_ir(_BIAS_GELU, monkeypatch)
    ir = _loop_ir(_BIAS_GELU, monkeypatch, inplace=True)
    assert "diff.check" not in ir
    assert re.search(r"@llvm\.fma\.v(8|16)f32", ir), "the in-place loop ran scalar"


_ROW_MAX = """HloModule rowmax
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
fused {
  p0 = f32[64,1024] parameter(0)
  i = f32[] constant(-inf)
  r = f32[64] reduce(p0, i), dimensions={1}, to_apply=mx
  b = f32[64,1024] broadcast(r), dimensions={0}
  ROOT s = f32[64,1024] subtract(p0, b)
}
ENTRY main {
  x = f32[64,1024] parameter(0)
  ROOT f = f32[64,1024] fusion(x), kind=kInput, calls=fused
}
"""


def test_row_max_folds_int32_codes_in_vector_lanes(monkeypatch):
    """row_folds.coded_extreme: a row's f32 max is the max of its elements' int32 order
    codes.  Widened to int64 (numba's default for integer arithmetic), the fold gives the
    same bits but AVX2 has no packed int64 max: f32[4096,1024] 0.61 -> 0.24 ms with AVX2
    code once the codes stayed int32.  The IR must fold i32 lanes, and no i64 ones."""
    from xlaplug.backends.cpu.row_fusion import row_work
    from xlaplug.backends.cpu.row_loop import compile_row_loop
    monkeypatch.setenv("XLAPLUG_JIT_CACHE", "0")
    comp = next(c for c in parse_module(_ROW_MAX).computations if c.name == "fused")
    m, k, levels = row_work(comp)
    fn = compile_row_loop(comp, m, k, levels, False)
    x = np.linspace(-2, 2, m * k, dtype=np.float32)
    out = np.empty(m * k, np.float32)
    fn(out, x)
    np.testing.assert_array_equal(out.reshape(m, k), (x.reshape(m, k) - x.reshape(m, k).max(
        1, keepdims=True)))
    ir = fn.inspect_llvm(fn.signatures[0])
    assert re.search(r"@llvm\.smax\.v(8|16)i32", ir), "the codes' max ran scalar"
    assert not re.search(r"(@llvm\.[su](max|min)\.v\d+i64|icmp s[gl][te] <\d+ x i64>)", ir), \
        "the codes were widened to int64"


# A process whose numba makes AVX2 code (as on a CPU without AVX-512) compiles a
# hardware-flushed tanh loop and prints, for the block of its vector loop (the one with the
# packed FMAs), how many FMAs and how many broadcasts of constants it holds.
_AVX2_TANH = r"""
import re, sys
import numpy as np
from xlaplug.backends.common.fusion_contents import loop_shape
from xlaplug.backends.cpu.fused_loop import compiled_loop_fn
from xlaplug.hlo import parse_module
text = ("HloModule t\n\nfused {\n  p0 = f32[4096] parameter(0)\n"
        "  ROOT r = f32[4096] tanh(p0)\n}\n\nENTRY main {\n  a = f32[4096] parameter(0)\n"
        "  ROOT f = f32[4096] fusion(a), kind=kLoop, calls=fused\n}\n")
comp = next(c for c in parse_module(text).computations if c.name == "fused")
fn = compiled_loop_fn(comp, tuple(loop_shape(comp)), parallel=False, hardware=True)
x = np.linspace(-3, 3, 4096, dtype=np.float32)
fn(np.empty(4096, np.float32), x)
blocks, at = {}, None
for line in fn.inspect_asm(fn.signatures[0]).splitlines():
    if re.match(r"^\.LBB\d+_\d+:", line):
        at = line
    counts = blocks.setdefault(at, [0, 0])
    counts[0] += bool(re.search(r"vfn?madd\w*ps\s.*%ymm", line))
    counts[1] += "vbroadcastss" in line
print(*max(blocks.values()))
"""


def test_avx2_loops_keep_their_constants_in_registers(tmp_path):
    """llvm_tuning.py: in AVX2 code (no embedded broadcasts) a blocked loop's polynomial
    constants are hoisted out of the vector loop; LLVM's default reloaded each one every
    iteration (about 20 of a tanh loop's 48 instructions per 8 elements)."""
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    from xlaplug.backends.cpu import llvm_tuning
    # the AVX2 CPU `benchmarks/run.py --isa avx2` compiles for: one feature list
    isa_py = Path(__file__).resolve().parent.parent / "benchmarks" / "isa.py"
    spec = importlib.util.spec_from_file_location("bench_isa", isa_py)
    isa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(isa)
    features = isa.AVX2_FEATURES
    assert llvm_tuning.hoists_constants(features)
    assert not llvm_tuning.hoists_constants(features + ",+avx512f")
    assert not llvm_tuning.hoists_constants("+neon,+fp-armv8")
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": features,
           "XLAPLUG_JIT_CACHE": "0", "XLAPLUG_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", _AVX2_TANH], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    fmas, broadcasts = map(int, out.stdout.split())
    assert fmas >= 9, "the tanh loop ran scalar"
    assert broadcasts == 0, f"{broadcasts} constants broadcast in every iteration"


def test_flushed_loop_allocates_its_mxcsr_slots_once(monkeypatch):
    """gang_intrinsics' MXCSR slots are allocas of the function's entry block: made where
    the intrinsic is called -- once per block of 16,384 elements -- each grew the stack by
    16 bytes until the loop returned, and a function with such dynamic allocas cannot
    realign its stack for 64-byte spills."""
    ir = _loop_ir(_BIAS_GELU.replace("64,1024", "4,65536").replace("[1024]", "[65536]"),
                  monkeypatch, parallel=False, hardware=True)
    # the loop itself (not numba's Python wrapper of it, `_ZN7cpython...`)
    bodies = re.findall(r"^define [^\n]*@\"?_ZN\d+_3cdynamic\w*loop[^\n]*\{\n(.*?)^\}", ir,
                        re.M | re.S)
    assert bodies, "no loop function in the IR"
    for body in bodies:
        blocks = [b for b in re.split(r"^[\w.\"$-]+:", body, flags=re.M) if b.strip()]
        assert "llvm.x86.sse.ldmxcsr" in body and len(blocks) > 1
        assert not any("alloca" in b for b in blocks[1:]), "an alloca outside the entry block"
