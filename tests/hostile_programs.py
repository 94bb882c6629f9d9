"""Generators of large or deep HLO programs for the hostile-input tests (not a test file)."""


def many_calls(n: int) -> str:
    """An entry making n calls of one small computation, each on the last one's result."""
    lines = ["HloModule many_calls", "f {", "  p = f32[] parameter(0)",
             "  r = f32[] negate(p)", "  ROOT s = f32[] add(r, p)", "}", "ENTRY main {",
             "  x0 = f32[] parameter(0)"]
    for k in range(n):
        lines.append(f"  x{k + 1} = f32[] call(x{k}), to_apply=f")
    lines.append(f"  ROOT out = f32[] negate(x{n})")
    return "\n".join(lines + ["}"]) + "\n"


def many_tuple_gtes(n: int) -> str:
    """n tuples each read back by a get-tuple-element, chained."""
    lines = ["HloModule many_gtes", "ENTRY main {", "  x0 = f32[] parameter(0)"]
    for k in range(n):
        lines.append(f"  t{k} = (f32[], f32[]) tuple(x{k}, x0)")
        lines.append(f"  x{k + 1} = f32[] get-tuple-element(t{k}), index=0")
    lines.append(f"  ROOT out = f32[] negate(x{n})")
    return "\n".join(lines + ["}"]) + "\n"


def call_chain(n: int, callers_first: bool = True) -> str:
    """c{n-1} calls c{n-2} ... calls c0; every level's result is named `r`."""
    comps = ["c0 {\n  p = f32[] parameter(0)\n  ROOT r = f32[] negate(p)\n}"]
    for k in range(1, n):
        comps.append(f"c{k} {{\n  p = f32[] parameter(0)\n"
                     f"  ROOT r = f32[] call(p), to_apply=c{k - 1}\n}}")
    if callers_first:
        comps.reverse()
    entry = (f"ENTRY main {{\n  x = f32[] parameter(0)\n"
             f"  ROOT r = f32[] call(x), to_apply=c{n - 1}\n}}")
    return "HloModule chain\n" + "\n".join(comps + [entry]) + "\n"


def doubling_calls(levels: int) -> str:
    """Each level calls the one below twice: 2^levels instructions once inlined."""
    comps = ["d0 {\n  p = f32[] parameter(0)\n  ROOT r = f32[] negate(p)\n}"]
    for k in range(1, levels + 1):
        comps.append(f"d{k} {{\n  p = f32[] parameter(0)\n"
                     f"  a = f32[] call(p), to_apply=d{k - 1}\n"
                     f"  ROOT b = f32[] call(a), to_apply=d{k - 1}\n}}")
    entry = (f"ENTRY main {{\n  x = f32[] parameter(0)\n"
             f"  ROOT r = f32[] call(x), to_apply=d{levels}\n}}")
    return "HloModule doubling\n" + "\n".join(comps + [entry]) + "\n"


def mixed_module(n: int) -> str:
    """About n instructions: calls, tuples, fusions and elementwise chains."""
    s = "f32[256,256]"
    lines = ["HloModule mixed", "", "f {", f"  a = {s} parameter(0)", f"  b = {s} parameter(1)",
             f"  m = {s} multiply(a, b)", f"  ROOT r = {s} add(m, a)", "}", ""]
    blocks = max(1, n // 10)
    for k in range(blocks):
        lines += [f"fc{k} {{", f"  p0 = {s} parameter(0)", f"  p1 = {s} parameter(1)",
                  f"  ROOT s = {s} subtract(p0, p1)", "}", ""]
    lines += ["ENTRY main {", f"  x0 = {s} parameter(0)", f"  w = {s} parameter(1)"]
    for k in range(blocks):
        lines += [f"  c{k} = {s} call(x{k}, w), to_apply=f",
                  f"  t{k} = ({s}, {s}) tuple(c{k}, x{k})",
                  f"  g{k} = {s} get-tuple-element(t{k}), index=0",
                  f"  e{k} = {s} exponential(g{k})",
                  f"  m{k} = {s} multiply(e{k}, w)",
                  f"  u{k} = {s} fusion(m{k}, x{k}), kind=kLoop, calls=fc{k}",
                  f"  x{k + 1} = {s} add(u{k}, g{k})"]
    lines += [f"  ROOT out = {s} negate(x{blocks})", "}"]
    return "\n".join(lines) + "\n"
