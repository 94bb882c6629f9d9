"""Malformed HLO text: every error is an HloSyntaxError whose str() is

    FILE:LINE:COL: error: MESSAGE
    <the offending source line>
    <a caret under COL>

with the right line and column, and a message that names the problem."""
from __future__ import annotations

import re

import pytest

from xlaplug.hlo import HloSyntaxError
from xlaplug.hlo.errors import HloError
from xlaplug.hlo.text.parser import _lark, parse_file, parse_module
from xlaplug.hlo.text.parser_diagnostics import _describe

FILE = "bad.hlo"


def error_of(text: str, filename: str = FILE) -> HloSyntaxError:
    with pytest.raises(HloSyntaxError) as info:
        parse_module(text, filename)
    return info.value


def check(text: str, line: int, at, *fragments: str, filename: str = FILE) -> str:
    """The error is at `line`, column `at` (an int) or where the substring `at` starts on that
    line; its message holds every fragment; the source line and caret follow."""
    err = error_of(text, filename)
    src = text.split("\n")[line - 1] if text else ""
    col = at if isinstance(at, int) else src.index(at) + 1
    out = str(err)
    head, *rest = out.split("\n")
    assert head.startswith(f"{filename}:{line}:{col}: error: "), out
    assert (err.line, err.column, err.file) == (line, col, filename)
    for f in fragments:
        assert f in head, f"{f!r} not in {head!r}"
    assert rest == [src, " " * (col - 1) + "^"], out
    assert not re.search(r"\b(a|an) (a|an|the)\b|unexpected (a|an) ", head), head
    return head


def entry(*lines: str, comps: str = "") -> str:
    return "HloModule m\n\n" + comps + "ENTRY e {\n" + "".join(f"  {ln}\n" for ln in lines) + "}\n"


P = "p = f32[2] parameter(0)"


# ---- names, opcodes, operands, computations ----------------------------------------------

def test_unknown_opcode():
    check(entry(P, "ROOT r = f32[2] frobnicate(p)"), 5, "frobnicate", "unknown opcode 'frobnicate'")


def test_unknown_opcode_with_odd_characters():
    check(entry(P, "ROOT r = f32[2] my_Op(p)"), 5, "my_Op", "unknown opcode 'my_Op'")


def test_unknown_opcode_suggests_close_match():
    check(entry(P, "ROOT r = f32[2] negat(p)"), 5, "negat", "unknown opcode 'negat'",
          "did you mean 'negate'?")


def test_undefined_operand():
    check(entry(P, "ROOT r = f32[2] add(p, q)"), 5, "q)", "instruction 'r' uses undefined operand 'q'")


def test_undefined_operand_with_sigil_and_comment():
    check(entry(P, "ROOT r = f32[2] add(%p, /*index=1*/ %q)"), 5, "%q)", "undefined operand 'q'")


def test_undefined_computation():
    check(entry(P, "ROOT r = f32[2] map(p), dimensions={0}, to_apply=nope"), 5, "nope",
          "instruction 'r' calls undefined computation 'nope'")


def test_undefined_computation_in_list():
    check(entry("i = s32[] parameter(0)", "ROOT r = f32[] conditional(i), branch_computations={e, nope}"),
          5, "nope", "undefined computation 'nope'")


def test_undefined_control_predecessor():
    check(entry(P, "ROOT r = f32[2] negate(p), control-predecessors={zz}"), 5, "zz",
          "undefined control predecessor 'zz'")


def test_duplicate_instruction_name():
    check(entry(P, "p = f32[2] negate(p)"), 5, "p =", "duplicate instruction name 'p'",
          "first defined at line 4")


def test_duplicate_computation_name():
    text = "HloModule m\n\nc {\n  ROOT p = f32[2] parameter(0)\n}\n\nc {\n  ROOT p = f32[2] parameter(0)\n}\n"
    check(text, 7, 1, "duplicate computation name 'c'", "first defined at line 3")


def test_two_entries():
    text = "HloModule m\n\nENTRY a {\n  ROOT p = f32[] parameter(0)\n}\n\nENTRY b {\n  ROOT p = f32[] parameter(0)\n}\n"
    check(text, 7, "b", "more than one ENTRY computation ('a' and 'b')")


def test_two_roots():
    check(entry("ROOT p = f32[2] parameter(0)", "ROOT r = f32[2] negate(p)"), 5, 3,
          "second ROOT instruction 'r'", "the first is 'p' at line 4")


def test_missing_parameter_number():
    check(entry(P, "q = f32[2] parameter(2)", "ROOT r = f32[2] add(p, q)"), 5, "q =",
          "has parameter(2) but no parameter(1)")


def test_duplicate_parameter_number():
    check(entry(P, "q = f32[2] parameter(0)", "ROOT r = f32[2] add(p, q)"), 5, "q =",
          "parameter number 0 used twice")


@pytest.mark.parametrize("body,at,message", [
    ("parameter(x)", "x)", "needs an integer parameter number, like parameter(0), got 'x'"),
    ("parameter(1.5)", "1.5", "needs an integer parameter number"),
    ("parameter()", ")", "is missing its parameter number"),
    ("parameter(-1)", "-1", "parameter number must be >= 0, got -1"),
    ("parameter(0, 1)", "0, 1", "needs an integer parameter number"),
])
def test_wrong_parameter_number_syntax(body, at, message):
    check(entry(f"ROOT p = f32[2] {body}"), 4, at, message)


def test_empty_operand():
    check(entry(P, "ROOT r = f32[2] add(p,,p)"), 5, ",p)", "empty operand")


def test_malformed_operand():
    check(entry(P, "ROOT r = f32[2] add(p, 3)"), 5, "3)", "malformed operand '3'")


def test_signature_disagrees_with_body():
    text = "HloModule m\n\nENTRY e (a: f32[3]) -> f32[2] {\n  ROOT p = f32[2] parameter(0)\n}\n"
    check(text, 3, "a:", "signature parameter 'a' has shape f32[3]", "parameter 0 'p' is f32[2]")


def test_signature_result_disagrees_with_root():
    text = "HloModule m\n\nENTRY e (a: f32[2]) -> s32[2] {\n  ROOT p = f32[2] parameter(0)\n}\n"
    check(text, 3, "e", "computation 'e' signature returns s32[2], but its root 'p' is f32[2]")


def test_signature_parameter_count():
    text = "HloModule m\n\nENTRY e (a: f32[2], b: f32[2]) -> f32[2] {\n  ROOT p = f32[2] parameter(0)\n}\n"
    check(text, 3, "e", "signature lists 2 parameters but the body has 1")


def test_computation_without_instructions():
    check("HloModule m\n\nENTRY e {\n}\n", 3, "e", "computation 'e' has no instructions")


def test_unknown_computation_attribute():
    check("HloModule m\n\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}, foo=\"x\"\n", 5, "foo",
          "unknown computation attribute 'foo' (only execution_thread is allowed)")


# ---- instruction structure -----------------------------------------------------------------

def test_missing_equals():
    check(entry("p f32[2] parameter(0)"), 4, 4, "expected '=' after instruction name 'p'")


def test_missing_shape():
    check(entry("p = parameter(0)"), 4, "parameter", "missing shape before 'parameter(...)'")


def test_instruction_name_not_an_identifier():
    check(entry("5 = f32[2] parameter(0)"), 4, "5", "instruction names must start with a letter",
          "found '5'")


def test_unbalanced_closing_brace():
    check(entry("ROOT p = f32[2] parameter(0)") + "}\n", 6, 1, "unbalanced '}'")


def test_unexpected_character():
    check(entry("ROOT p = f32[2] parameter(0) @"), 4, "@", "unexpected character '@'")


def test_unbalanced_operand_parenthesis():
    check(entry(P, "ROOT r = f32[2] add(p, p"), 5, "(p", "unbalanced '('",
          "operand list of 'add' is never closed")


def test_opcode_without_operands():
    check(entry(P, "ROOT r = f32[2] negate", "q = f32[2] negate(p)"), 5, 25,
          "expected '(' and the operands after opcode 'negate'")


# ---- shapes --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,at,message", [
    ("f32[2,x]", "f32", "malformed dimension 'x' in shape 'f32[2,x]'"),
    ("f32[2", "[", "the '[' after 'f32' is never closed"),
    ("f32", "f32", "malformed shape 'f32': dimensions in brackets must follow the element type"),
    ("f32[2]{1}", "f32", "layout {1} is not a permutation of the 1 dimensions"),
    ("f32[2,3]{0,0}", "f32", "layout {0,0} is not a permutation"),
    ("f32[2]{a}", "f32", "malformed layout '{a}'"),
    ("f32[2]{0:Q(1)}", "f32", "malformed layout attributes ':Q(1)'"),
    ("f32[2]{0", "{", "layout '{' is not closed"),
    ("F32[2]", "F32", "unknown element type 'F32' in shape 'F32[2]' (element types are lowercase"),
    ("Q32[2]", "Q32", "unknown element type 'Q32' in shape 'Q32[2]'"),
    ("f32[<=x]", "f32", "malformed dimension '<=x'"),
    ("token[2]", "token", "token shape takes no dimensions"),
])
def test_bad_shape_syntax(shape, at, message):
    check(entry(f"ROOT p = {shape} parameter(0)"), 4, at, message)


@pytest.mark.parametrize("etype", ["f33", "int32", "float", "s128", "bf8"])
def test_unknown_element_type(etype):
    check(entry(f"ROOT p = {etype}[2] parameter(0)"), 4, etype, f"unknown element type '{etype}'")


def test_unknown_element_type_in_tuple_shape():
    check(entry("ROOT p = (f32[2], q8[3]) parameter(0)"), 4, "q8", "unknown element type 'q8'")


# ---- literals ------------------------------------------------------------------------------

def test_unterminated_literal():
    check(entry("ROOT c = f32[2] constant({1, 2)"), 4, "{1", "unterminated '{' in literal")


def test_unterminated_literal_at_end_of_line():
    check(entry("ROOT c = f32[2] constant({1, 2", "x = f32[] constant(1)"), 4, "({1",
          "unbalanced '('", "operand list of 'constant' is never closed")


def test_literal_wrong_element_count():
    check(entry("ROOT c = f32[2,2] constant({ {1, 2}, {3} })"), 4, "} }",
          "expected 2 elements in dimension 1 of sub-array [1], found 1")


def test_literal_bad_value():
    check(entry("ROOT c = s8[3] constant({1, 300, 2})"), 4, "300", "value 300 is out of range for s8")


def test_literal_for_token():
    check(entry("ROOT c = token[] constant(1)"), 4, "1)", "has no literal")


# ---- braces, strings, truncation, empty and binary files ---------------------------------------

def test_unterminated_computation_brace():
    text = "HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n"
    check(text, 4, len("  ROOT p = f32[2] parameter(0)") + 1,
          "unexpected end of file", "computation 'e' (line 3) is missing its closing '}'")


def test_unterminated_attribute_brace():
    text = entry(P, "ROOT r = f32[2] negate(p), sharding={devices=[2]0,1")
    check(text, 5, "{dev", "unterminated '{' in the value of attribute 'sharding'")


def test_unterminated_string():
    check(entry(P, 'ROOT r = f32[2] custom-call(p), custom_call_target="foo'), 5, '"foo',
          "unterminated string in the value of attribute 'custom_call_target'")


def test_unterminated_string_in_metadata():
    check(entry('ROOT p = f32[2] parameter(0), metadata={op_name="abc}'), 4, "{op",
          "unterminated '{' in the value of attribute 'metadata'")


def test_unterminated_string_in_stack_table():
    check('HloModule m\n\nFileNames\n1 "a.py\n', 4, '"', "unterminated string literal")


@pytest.mark.parametrize("text,line,col,message", [
    ("HloModule", 1, 10, "the module is truncated (expected a name)"),
    ("HloModule m\n\nENTRY", 3, 6, "the module is truncated"),
    ("HloModule m\n\nENTRY e", 3, 8, "expected '(' or '{'"),
    ("HloModule m\n\nENTRY e {\n  p = f32[2] param", 4, 19,
     "unexpected end of file after 'param': the module is truncated"),
    ("HloModule m\n\nENTRY e {\n  ROOT r =", 4, 11, "the module is truncated"),
    ("HloModule m\n\nENTRY e {\n  ROOT r = f32[2] parameter(0)", 4, 31,
     "computation 'e' (line 3) is missing its closing '}'"),
    ("HloModule m\n\nENTRY e {\n  ROOT r = f32[2] parameter(0), dimensions=", 4, 44,
     "attribute 'dimensions' has no value"),
])
def test_truncated_file(text, line, col, message):
    check(text, line, col, message)


def test_empty_file():
    check("", 1, 1, "empty module")


def test_whitespace_only_file():
    check("  \n\t\n   \n", 1, 1, "empty module")


def test_module_without_computations():
    check("HloModule m\n", 1, 1, "module has no computations")


def test_binary_garbage_file(tmp_path):
    path = tmp_path / "garbage.hlo"
    path.write_bytes(b"HloModule m\n\nENTRY e {\n  p = f32[2] par\x00\x01ameter(0)\n}\n")
    with pytest.raises(HloSyntaxError) as info:
        parse_file(str(path))
    out = str(info.value).split("\n")
    assert out[0].startswith(f"{path}:4:17: error: binary data in HLO text (control character 0x00)")
    assert out[1] == "  p = f32[2] par??ameter(0)"   # control characters shown safely
    assert out[2] == " " * 16 + "^"


@pytest.mark.parametrize("name", ["p", "p\u00e9"])  # ASCII text, and text that is not
@pytest.mark.parametrize("code", [0x00, 0x08, 0x0e, 0x1f, 0x7f])
def test_control_characters_anywhere_are_binary_data(name, code):
    """Every control character _CONTROL names is found, in an ASCII text (the bytes
    translation finds it) and in one that is not (the expression alone); the whitespace
    controls (tab to carriage return) are text."""
    ok = f"HloModule m\r\n\x0b\x0cENTRY e {{\n\t{name} = f32[2] parameter(0)\n}}\n"
    assert parse_module(ok).entry.root.name == name
    err = error_of(ok.replace("parameter", f"param{chr(code)}eter"), FILE)
    assert (err.line, err.column) == (3, 17 + len(name))
    assert f"binary data in HLO text (control character 0x{code:02x})" in str(err)


def test_random_binary_file(tmp_path):
    path = tmp_path / "random.hlo"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(HloSyntaxError) as info:
        parse_file(str(path))
    assert str(info.value).startswith(f"{path}:1:1: error: binary data in HLO text")


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.hlo"
    path.write_bytes("HloModule m\n\nENTRY e {\n  p = f32[2] parameter(0), metadata={op_name=\"é".encode()
                     + b"\xff\xfe\"}\n}\n")
    with pytest.raises(HloSyntaxError) as info:
        parse_file(str(path))
    out = str(info.value).split("\n")
    col = len('  p = f32[2] parameter(0), metadata={op_name="é') + 1
    assert out[0] == f"{path}:4:{col}: error: file is not UTF-8 text (byte 0xff)"
    assert out[1].startswith('  p = f32[2] parameter(0), metadata={op_name="é\ufffd')
    assert out[2] == " " * (col - 1) + "^"


# ---- attributes of the wrong kind ----------------------------------------------------------

@pytest.mark.parametrize("instr,at,message", [
    ("reverse(p), dimensions=abc", "abc", "attribute 'dimensions': expected an integer list in braces, got 'abc'"),
    ("reverse(p), dimensions={0,x}", "x}", "attribute 'dimensions': expected an integer list like {0,1}, found 'x'"),
    ("get-tuple-element(p), index={0}", "{0}", "attribute 'index': expected an integer, got '{0}'"),
    ("compare(p, p), direction=1", "1", "attribute 'direction': expected a comparison direction (EQ, NE, GE, GT, LE, LT), got '1'"),
    ("compare(p, p), direction=LT, type=REAL", "REAL", "attribute 'type': expected a comparison type"),
    ("reduce-window(p, p), window={size=3 foo=2}, to_apply=e", "foo",
     "attribute 'window': unknown window field 'foo=2'"),
    ("reduce-window(p, p), window={size=3 stride=a}, to_apply=e", "a}",
     "attribute 'window': in stride=: expected an integer, got 'a'"),
    ("reduce-window(p, p), window={size=3x3 stride=2}, to_apply=e", "{size",
     "window stride= has 1 dimensions but size= has 2"),
    ("slice(p), slice={[0:a]}", "[0:a]", "attribute 'slice': expected [start:limit] or [start:limit:stride]"),
    ("pad(p, p), padding=0_a", "0_a", "attribute 'padding': expected padding low_high"),
    ("convolution(p, p), dim_labels=b0f_0io->bf", "b0f", "disagree on the number of spatial dimensions"),
    ("fusion(p), kind=kFoo, calls=e", "kFoo", "attribute 'kind': expected a fusion kind (kLoop, kInput, kOutput, kCustom)"),
    ("fft(p), fft_type=DFT, fft_length={2}", "DFT", "expected an FFT type"),
    ("rng(p, p), distribution=uniform", "uniform", "expected a random distribution"),
    ("triangular-solve(p, p), transpose_a=maybe", "maybe", "expected a transpose option"),
    ("sort(p), dimensions={0}, is_stable=yes, to_apply=e", "yes", "attribute 'is_stable': expected true or false, got 'yes'"),
    ("custom-call(p), custom_call_target=foo", "foo", "attribute 'custom_call_target': expected a quoted string"),
    ("custom-call(p), custom_call_target=\"x\", api_version=API_VERSION_NEW", "API_VERSION_NEW",
     "expected a custom-call API version"),
    ("custom-call(p), custom_call_target=\"x\", backend_config=abc", "abc", "backend_config must be a quoted string"),
    ("dot(p, p), operand_precision={fast,default}", "{fast", "expected operand precisions"),
    ("all-gather(p), replica_groups={{0,a}}, dimensions={0}", "a}", "attribute 'replica_groups'"),
    ("all-gather(p), replica_groups=[2,2]<=[3], dimensions={0}", "[2,2]",
     "iota [2,2] has 4 devices but <=[3] has 3"),
    ("collective-permute(p), source_target_pairs={{0,1,2}}", "{0,1,2}", "expected a {source,target} pair"),
    ("negate(p), sharding={devices=[2,2]0,1,2}", "{devices", "devices=[2,2] needs 4 device ids, got 3"),
    ("negate(p), sharding={replicatd}", "replicatd", "unexpected 'replicatd' in sharding"),
    ("negate(p), sharding={maximal}", "{maximal", "a maximal sharding needs device=N"),
    ("negate(p), sharding={devices=[4]<=[2,2]T(0,0)}", "{devices", "T(0,0) is not a permutation"),
    ("negate(p), sharding={devices=[2]0,1 last_tile_dims={bogus}}", "bogus", "unknown sharding type 'bogus'"),
    ("negate(p), metadata={op_name=abc}", "abc", "metadata field 'op_name' needs a quoted string or an integer"),
    ("negate(p), metadata={op_name=\"a\" 5}", "5}", "malformed metadata near '5'"),
    ("negate(p), frontend_attributes={a=1}", "1}", "value of 'a' must be a quoted string"),
    ("negate(p), result_accuracy={mode}", "}", "expected '='"),
    ("negate(p), result_accuracy={tolerance={atol=x}}", "x}", "expected a number"),
    ("fusion(p), kind=kLoop, calls=e, output_to_operand_aliasing={{0} (0, {})}", "(0, {})}",
     "expected ':' after the output shape index"),
    ("custom-call(p), custom_call_target=\"x\", operand_layout_constraints={f32[2]{0}, f99[2]}", "f99",
     "unknown element type 'f99'"),
    ("negate(p), control-predecessors={1}", "1}", "expected an instruction name"),
    ("reverse(p), dimensions={0}, dimensions={0}", "SECOND dimensions",
     "attribute 'dimensions' given twice on 'r'"),
])
def test_attribute_of_the_wrong_kind(instr, at, message):
    text = entry(P, f"ROOT r = f32[2] {instr}")
    line = text.split("\n")[4]
    if at == "SECOND dimensions":  # the duplicate's name
        col = line.rindex("dimensions") + 1
    else:
        col = line.index(at, line.index("(")) + 1
    check(text, 5, col, message)


@pytest.mark.parametrize("header,at,message", [
    ("is_scheduled=maybe", "maybe", "attribute 'is_scheduled': expected true or false"),
    ("replica_count=two", "two", "attribute 'replica_count': expected an integer"),
    ("entry_computation_layout={(f32[2]{0}->f32[2]{0}}", "(f32", "needs '(parameters)->result'"),
    ("entry_computation_layout={(f32[2]{0})->f32[2]{5}}", "f32[2]{5}", "layout {5} is not a permutation"),
    ("input_output_alias={ {0}: (0, {}, maybe-alias) }", "maybe", "expected may-alias or must-alias"),
    ("buffer_donor={ (0) }", ") }", "expected ','"),
    ("allow_spmd_sharding_propagation_to_output={yes}", "{yes}", "expected true or false"),
])
def test_header_attribute_of_the_wrong_kind(header, at, message):
    text = f"HloModule m, {header}\n\nENTRY e {{\n  ROOT p = f32[2] parameter(0)\n}}\n"
    line = text.split("\n")[0]
    check(text, 1, line.index(at, line.index("=")) + 1, message)


def test_attribute_syntax_errors():
    check(entry(P, "ROOT r = f32[2] reverse(p), dimensions=, foo=1"), 5, ", foo",
          "attribute 'dimensions' has no value")
    check(entry(P, "ROOT r = f32[2] reverse(p), ={0}"), 5, "={0}",
          "expected an attribute name after ','")
    check(entry(P, "ROOT r = f32[2] reverse(p), dimensions {0}"), 5, " {0}",
          "expected '=' after attribute name 'dimensions'")


def test_braces_nested_deeper_than_the_lexer_regex():
    # Past the ATTRS regex's eight levels the lexer completes the value (parser_deep.py);
    # the limit is XLA's 8,192 levels (tests/test_parser_xla_forms.py).
    deep = '{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":1}}}}}}}}}'
    m = parse_module(entry(f"ROOT p = f32[2] parameter(0), backend_config={deep}"), FILE)
    assert str(m.entry.root.attrs["backend_config"]) == deep


# ---- positions on long and tabbed lines ------------------------------------------------------

def test_caret_on_a_tabbed_line():
    text = "HloModule m\n\nENTRY e {\n\tp = f32[2] parameter(0)\n\tROOT r = f32[2] frob(p)\n}\n"
    err = error_of(text)
    out = str(err).split("\n")
    assert out[0].startswith(f"{FILE}:5:18: error: unknown opcode 'frob'")
    assert out[1] == " ROOT r = f32[2] frob(p)"  # a tab is shown as one space
    assert out[2].index("^") == out[1].index("frob")


def test_caret_on_a_very_long_line():
    name = "x" * 400
    text = entry(f'ROOT p = f32[2] parameter(0), metadata={{op_name="{name}"}}, frob=')
    err = error_of(text)
    out = str(err).split("\n")
    assert out[0].startswith(f"{FILE}:4:{len(text.split(chr(10))[3]) + 1}: error: attribute 'frob' has no value")
    assert len(out[1]) < 200 and out[1].startswith("...")
    assert out[2].index("^") == len(out[1])  # just past the end of the shown line


def test_non_ascii_text_before_the_error():
    text = entry('p = f32[2] parameter(0), metadata={op_name="日本語"}', "ROOT r = f32[2] frob(p)")
    check(text, 5, "frob", "unknown opcode 'frob'")


# ---- message wording -----------------------------------------------------------------------

def test_describe_is_grammatical_for_every_terminal():
    for term in _lark().terminals:
        phrase = _describe(term.name)
        assert re.match(r"(a |an |the |')", phrase), f"{term.name}: {phrase!r}"
        assert not re.match(r"(a|an) (a|an|the) ", phrase)
    assert _describe("INT") == "an integer"
    assert _describe("$END") == "the end of the file"


@pytest.mark.parametrize("text", [
    entry("5 = f32[2] parameter(0)"),
    entry(P, "ROOT r = f32[2] negate(p) 7"),
    "HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n}\n",
    "HloModule m, 5\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n",
    "HloModule m\n\n5 {\n  ROOT p = f32[2] parameter(0)\n}\n",
    "HloModule m\n\nENTRY e (5) -> f32[] {\n  ROOT p = f32[] parameter(0)\n}\n",
])
def test_no_ungrammatical_messages(text):
    err = error_of(text)
    head = str(err).split("\n")[0]
    assert not re.search(r"unexpected (a|an) |\b(a|an) (a|an)\b", head), head
    assert re.match(rf"{re.escape(FILE)}:\d+:\d+: error: \S", head)


def test_every_error_is_an_hlo_error():
    assert issubclass(HloSyntaxError, HloError)
