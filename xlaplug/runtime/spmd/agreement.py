"""Under mpiexec, before the first collective: do the ranks run the same thing?

Each rank writes a fixed 128-byte header -- a fingerprint of the module as the passes left
it (its printed text), the device grid, and the options that change which collectives run
(--repeat, --max-while-iterations, gather) -- and the ranks swap them in one polled
all-gather (MpiTransport.gather_fixed: bounded by the collective timeout, never a blocking
call).  Every rank then holds every header, so every rank reaches the same verdict, and
ranks that disagree never enter the communicator splits that follow (one rank with
--replicas 2 and one with --replicas 4 used to hang there, one of them spinning).  The
error names rank 0 and the first rank that differs from it, and what each has.
"""
from __future__ import annotations

import hashlib
import struct

from ..options import RunError

_MAGIC = b"xlaplug\x01"  # the header's format: a rank of another xlaplug differs here
# magic, fingerprint, replicas, partitions, repeat, gather, while limit, module name (or a
# failed rank's error), failed: 116 bytes, padded to 128
_LAYOUT = struct.Struct("<8s16siiiiq64si")
RUN_HEADER_BYTES = 128
_ASK = ("every rank must run the same module with the same --replicas, --partitions, "
        "--repeat and --max-while-iterations")


class RanksDisagree(RunError):
    """Every rank finds it alike (every rank holds every header): rank 0 reports."""


def fingerprint(module) -> bytes:
    """16 bytes of SHA-256 over the module's printed text (the same on every rank for the
    same file and passes, whatever each process's hash seed: the printer orders by the
    module, never by a set)."""
    from ...hlo.text.printer import module_to_text
    return hashlib.sha256(module_to_text(module).encode()).digest()[:16]


def run_header(module, grid, options) -> bytes:
    limit = options.max_while_iterations
    raw = _LAYOUT.pack(_MAGIC, fingerprint(module), grid.replicas, grid.partitions,
                       options.repeat, 1 if options.gather else 0,
                       -1 if limit is None else limit, module.name.encode()[:64], 0)
    return raw.ljust(RUN_HEADER_BYTES, b"\0")


def failure_header(message: str) -> bytes:
    """What a rank that failed before the run (its module did not compile, its inputs did
    not load) sends in place of its run header: its error's digest and first words."""
    digest = hashlib.sha256(message.encode()).digest()[:16]
    raw = _LAYOUT.pack(_MAGIC, digest, 0, 0, 0, 0, 0, message.encode()[:64], 1)
    return raw.ljust(RUN_HEADER_BYTES, b"\0")


def _fields(raw: bytes) -> dict:
    magic, fp, r, p, repeat, gather, limit, name, failed = _LAYOUT.unpack_from(raw)
    return {"magic": magic, "fingerprint": fp, "grid": (r, p), "repeat": repeat,
            "gather": gather, "limit": limit, "failed": failed,
            "name": name.rstrip(b"\0").decode(errors="replace")}


def _says(field: str, h: dict) -> str:
    """What a rank has for `field`, as the message writes it."""
    if field == "magic":
        known = h["magic"][:7] == _MAGIC[:7]
        return f"run header format {h['magic'][7]}" if known else "no xlaplug run header"
    if field == "grid":
        return f"{h['grid'][0]} replicas x {h['grid'][1]} partitions"
    if field == "fingerprint":
        return f"module '{h['name']}' (fingerprint {h['fingerprint'].hex()[:12]})"
    if field == "repeat":
        return f"--repeat {h['repeat']}"
    if field == "limit":
        return f"--max-while-iterations {h['limit'] if h['limit'] >= 0 else 'unset'}"
    return "outputs gathered on rank 0" if h["gather"] else "outputs kept on each rank"


class RankFailedBeforeRun(RunError):
    """Another rank failed before the run and reports its error: this one stops quietly."""


def reporter(headers: list[bytes]) -> int | None:
    """The rank that reports a failure before the run: rank 0 when every rank failed
    alike (the same error everywhere, said once), else the lowest rank that failed; None
    when none did."""
    fields = [_fields(h) for h in headers]
    failed = [i for i, f in enumerate(fields) if f["failed"]]
    if not failed:
        return None
    alike = len(failed) == len(fields) and len({f["fingerprint"] for f in fields}) == 1
    return 0 if alike else failed[0]


def check_agreement(headers: list[bytes]) -> None:
    """RanksDisagree when any rank's header differs from rank 0's, naming the first field
    that differs (in the order a reader would look: version, grid, module, options);
    RankFailedBeforeRun when a rank failed before the run (it reports)."""
    if reporter(headers) is not None:
        raise RankFailedBeforeRun("another rank failed before the run")
    first = headers[0]
    other = next((i for i, h in enumerate(headers) if h != first), None)
    if other is None:
        return
    a, b = _fields(first), _fields(headers[other])
    field = next((f for f in ("magic", "grid", "fingerprint", "repeat", "limit", "gather")
                  if a[f] != b[f]), "fingerprint")
    raise RanksDisagree(f"the ranks do not run the same thing: rank 0 has {_says(field, a)}, "
                        f"rank {other} has {_says(field, b)} ({_ASK})")


def agree_on_run(transport, module, grid, options) -> None:
    """Swap and check the run headers (see the module's docstring)."""
    check_agreement(transport.gather_fixed(run_header(module, grid, options)))


def failed_before_run(message: str, timeout: float) -> bool:
    """This rank failed before the run (under mpiexec): the others are told in place of
    its run header -- they stop at once, where they waited for it until the timeout -- and
    whether this rank reports its error is returned (reporter)."""
    from ...backends.common.errors import ExecutionError
    from ...backends.spmd.mpi import MpiTransport
    try:
        transport = MpiTransport(timeout)
        return reporter(transport.gather_fixed(failure_header(message))) == transport.rank
    except ExecutionError:  # the others never came (or another rank aborted): say it here
        return True
