"""Terminal colouring of HLO text (rich), used when stdout is a terminal."""
from rich.highlighter import RegexHighlighter
from rich.theme import Theme


class HloHighlighter(RegexHighlighter):
    base_style = "hlo."
    highlights = [
        r"(?P<keyword>\b(?:HloModule|ENTRY|ROOT)\b)",
        r"(?P<shape>\b[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?)",
        r"(?P<opcode>(?<= )[a-z][a-z0-9\-]*(?=\())",
        r"(?P<attr>\b[a-z_][\w\-]*(?==))",
        r"(?P<string>\"(?:[^\"\\]|\\.)*\")",
        r"(?P<comment>//[^\n]*)",
    ]


THEME = Theme({"hlo.keyword": "bold magenta", "hlo.shape": "cyan", "hlo.opcode": "bold green",
               "hlo.attr": "yellow", "hlo.string": "green", "hlo.comment": "dim"})
