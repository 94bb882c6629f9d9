"""What an Executable keeps between its runs, per device: the run contexts (thunk
sequences, compiled kernels, the constants' device copies) and the rng ops' state.

XLA keeps one executable and runs it many times; so does xlaplug.  A context is made on
first use for each (executor settings, device) -- RunOptions that change how kernels run
(interpret, max_while_iterations, seed, blas_threads) get their own -- and serves every
later call, so `exe(*arrays)` pays for preparing the module once, not per call.

The rng state is the executable's, per device and seed (rng_streams.RngState): XLA's
rng-get-and-update-state state lives in the executable and advances on every execution,
and `rng` (which XLA expands into arithmetic on that state) with it, so the k-th run draws
what XLA's k-th run of the same executable draws -- whether the runs come from
`--repeat N`, from one call each, or from contexts made for other settings.  A new seed
starts its own streams (RunOptions.seed offsets the initial state).

Runs of one Executable take turns (`lock`): a kept context holds one run's per-run state.
"""
from __future__ import annotations

import threading

from .options import RunOptions


class DeviceContexts:
    def __init__(self, module, session):
        self.module = module
        self.session = session
        self.lock = threading.RLock()
        self._contexts: dict[tuple, object] = {}
        self._prepared: dict[tuple, object] = {}
        self._rng: dict[tuple[int, int], object] = {}

    @staticmethod
    def settings(options: RunOptions) -> tuple:
        """The executor settings a context is made for (RunOptions.executor_options)."""
        return tuple(sorted(options.executor_options().items()))

    def rng(self, seed: int, device: int):
        """Device `device`'s rng state for runs with `seed`, made on first use and kept."""
        from ..backends.common.rng_streams import RngState
        key = (seed, device)
        st = self._rng.get(key)
        if st is None:
            st = self._rng[key] = RngState()
        return st

    def prepared(self, options: RunOptions):
        """Device 0's runner.Prepared for a run on one device (its context, checked for
        missing kernels, and the bytes its thunk sequence holds at most)."""
        key = self.settings(options)
        prep = self._prepared.get(key)
        if prep is None:
            from .runner import prepare
            prep = self._prepared[key] = prepare(self.module, self.session, options,
                                                 rng=self.rng(options.draw_seed, 0))
            self._contexts[(key, 0)] = prep.ctx
        return prep

    def context(self, options: RunOptions, device: int):
        """Device `device`'s context for runs as `options` say, made on first use and kept."""
        key = (self.settings(options), device)
        ctx = self._contexts.get(key)
        if ctx is None:
            from .executor import ExecContext
            ctx = self._contexts[key] = ExecContext(
                self.session.device, options.executor_options(),
                overrides=self.session.resolve, rng=self.rng(options.draw_seed, device))
        return ctx

    def for_options(self, options: RunOptions):
        """`contexts(d)` for a run as `options` say: device d's kept context."""
        key = self.settings(options)
        return lambda d: self._contexts.get((key, d)) or self.context(options, d)
