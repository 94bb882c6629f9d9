"""Which random stream an rng instruction draws, and the state rng-get-and-update-state
keeps: plain integers both devices' kernels compute their bits from (cpu/rng_draws.py's
docstring has the scheme), so CPU and CUDA draw the same values."""
from __future__ import annotations

import hashlib


class RngState:
    """The state rng ops keep across runs of one executable, as XLA keeps it in the
    executable (its RngGetAndUpdateStateThunk's state; `rng`, which XLA expands into
    arithmetic on that state, advances with it): every execution of the executable on a
    device continues where the last left off, for `--repeat N` and repeated API calls alike
    (tests/test_rng_state.py checks it against XLA running a module twice).  A run context
    (runtime/executor.ExecContext) is given one: the executable's for its device, or a
    fresh one for a one-off run (a freshly compiled executable starts over).

    calls: rng instruction -> its executions so far; states: rng-get-and-update-state ->
    its 128-bit state (a Python int on the CPU); device_states: the same held in a device
    array (CUDA); regions: the states of the devices of a region the run spawns (a
    shard_map body's mesh), by (region instruction, device)."""

    def __init__(self):
        self.calls: dict[int, int] = {}
        self.states: dict[int, int] = {}
        self.device_states: dict[int, object] = {}
        self.regions: dict[tuple, "RngState"] = {}

    def region(self, ins, device: int) -> "RngState":
        """The state of `device` of the region `ins` runs (kept with this one)."""
        key = (id(ins), device)
        st = self.regions.get(key)
        if st is None:
            st = self.regions[key] = RngState()
        return st


def run_seed(ctx) -> int:
    """The run option `seed` (default 0)."""
    return int(ctx.options.get("seed", 0) or 0)


def rng_stream(ins, ctx) -> tuple[int, int]:
    """(key, call) of this execution of an rng instruction, advancing its call counter.

    The 64-bit Philox key hashes the seed with the instruction's name (stable across
    processes, unlike id() or hash(), so a seed reproduces a run anywhere); `call` counts
    the instruction's executions so far (`ctx.rng`, an RngState kept across the runs of one
    executable), so an rng in a loop body draws fresh values each iteration and a later run
    of the same executable continues the stream, as XLA's does."""
    calls = ctx.rng.calls
    call = calls.get(id(ins), 0)
    calls[id(ins)] = call + 1
    digest = hashlib.blake2b(f"{run_seed(ctx)}\0{ins.name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little"), call % 2 ** 64


# XLA:CPU's RngGetAndUpdateStateThunk starts every instruction's 128-bit state here.
_RNG_STATE_INITIAL = 0x7012395


def initial_state(ctx) -> int:
    """The 128-bit state every rng-get-and-update-state starts an executable with."""
    return (_RNG_STATE_INITIAL + run_seed(ctx)) % 2 ** 128


def state_delta(ins) -> int:
    """The delta attribute of rng-get-and-update-state, modulo 2^128."""
    return int(str(ins.attrs.get("delta", 0))) % 2 ** 128  # an int, or Raw text
