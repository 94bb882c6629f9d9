"""Which random stream an rng instruction draws, and the state rng-get-and-update-state
keeps: plain integers both devices' kernels compute their bits from (cpu/rng.py's
docstring has the scheme), so CPU and CUDA draw the same values."""
from __future__ import annotations

import hashlib


def ctx_dict(ctx, attr: str) -> dict:
    """A dict kept on the run context (a fresh one each call when ctx cannot hold it)."""
    d = getattr(ctx, attr, None)
    if d is None:
        d = {}
        try:
            setattr(ctx, attr, d)
        except AttributeError:
            pass
    return d


def run_seed(ctx) -> int:
    """The run option `seed` (default 0)."""
    opts = getattr(ctx, "options", None) or {}
    return int(opts.get("seed", 0) or 0)


def rng_stream(ins, ctx) -> tuple[int, int]:
    """(key, call) of this execution of an rng instruction, advancing its call counter.

    The 64-bit Philox key hashes the seed with the instruction's name (stable across
    processes, unlike id() or hash(), so a seed reproduces a run anywhere); `call` counts
    the instruction's executions in this run context, so an rng in a loop body draws fresh
    values each iteration while a new run starts over."""
    calls = ctx_dict(ctx, "_xlaplug_rng_calls")
    call = calls.get(id(ins), 0)
    calls[id(ins)] = call + 1
    digest = hashlib.blake2b(f"{run_seed(ctx)}\0{ins.name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little"), call % 2 ** 64


# XLA:CPU's RngGetAndUpdateStateThunk starts every instruction's 128-bit state here.
_RNG_STATE_INITIAL = 0x7012395


def initial_state(ctx) -> int:
    """The 128-bit state every rng-get-and-update-state starts a run with."""
    return (_RNG_STATE_INITIAL + run_seed(ctx)) % 2 ** 128


def state_delta(ins) -> int:
    """The delta attribute of rng-get-and-update-state, modulo 2^128."""
    return int(str(ins.attrs.get("delta", 0))) % 2 ** 128  # an int, or Raw text
