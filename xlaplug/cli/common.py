"""What the verbs share: plugin options and the session they load, .npz files read as
the user named them, sizes given on the command line, highlighted HLO."""
from __future__ import annotations

import math
import os

import click


def plugin_options(fn):
    """--plugins-dir / --no-plugins / --strict, shared by every verb."""
    fn = click.option("--strict", is_flag=True,
                      help="A plugin that fails to load, or a kernel that fails, is fatal.")(fn)
    fn = click.option("--no-plugins", is_flag=True,
                      help="Load no plugins, the bundled ones included.")(fn)
    fn = click.option("--plugins-dir", "plugins_dirs", multiple=True,
                      help="Load plugins from this directory (repeatable).")(fn)
    return fn


def excess_precision_option(fn):
    """--excess-precision / --no-excess-precision, for compile and run."""
    return click.option(
        "--excess-precision/--no-excess-precision", default=True, show_default=True,
        help="Keep in f32 the bf16 results XLA:CPU keeps in f32 by default (an op whose "
             "result the HLO converts to f32 hands on its unrounded value); "
             "--no-excess-precision rounds every bf16 result as the HLO states, as XLA "
             "does under XLA_FLAGS=--xla_allow_excess_precision=false.")(fn)


def setup_plugins(plugins_dirs, no_plugins, strict, device="cpu", prefer="kernel", quiet=False):
    """This invocation's session: the plugins it loads and its device/prefer/strict (a
    plugin that fails to load is a `warning:` line unless `quiet`)."""
    import warnings

    from ..runtime.executable import load_session
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        return load_session(plugins_dirs, device=device, prefer=prefer, strict=strict,
                            no_plugins=no_plugins)


def highlight(text: str) -> None:
    from rich.console import Console
    from .highlight import THEME, HloHighlighter
    Console(highlighter=HloHighlighter(), theme=THEME, soft_wrap=True).print(text, end="",
                                                                          markup=False)


def load_npz(path: str, what: str) -> dict:
    import zipfile

    from ..runtime.driver import OptionError

    import numpy as np
    if not zipfile.is_zipfile(path):
        # np.load would read a lone .npy or a pickle; an .npz is a zip archive of .npy files.
        reason = ("no such file" if not os.path.exists(path) else
                  "it is a directory" if os.path.isdir(path) else "it is not an .npz file")
        raise OptionError(f"{what}: cannot read '{path}': {reason}")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        why = ("it holds pickled (object) arrays, which are not read"
               if "allow_pickle" in str(e) else str(e).splitlines()[0])
        raise OptionError(f"{what}: cannot read '{path}' as an .npz file: {why}") from None


def parse_bytes(text: str) -> int:
    """A size such as 512M, 2G, 1.5GiB or 1000000 as a positive number of bytes."""
    from ..runtime.driver import OptionError
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    scale = 1
    if t and t[-1] in mult:
        t, scale = t[:-1], mult[t[-1]]
    try:
        value = float(t)
    except ValueError:
        raise OptionError(f"--max-memory: cannot read '{text}' as a size (e.g. 512M, 2G)") from None
    if not math.isfinite(value) or value * scale > 1 << 62:
        raise OptionError(f"--max-memory: '{text}' is too large a size (e.g. 512M, 2G)")
    if value * scale < 1:
        raise OptionError(f"--max-memory: must be a positive size, got '{text}'")
    return int(value * scale)
