"""MPI ranks that do not run the same thing end within the collective timeout, every one of
them, with one line naming both sides -- never a hang, never exit 0 with a peer's
mismatched bytes (issue 27).

Two kinds of disagreement: ranks started on different modules or options (mpiexec's MPMD
form, `-n 1 A : -n 1 B`), caught before the first collective by the run's agreement; and
one module whose ranks take different paths (a branch on replica-id, a loop whose trip
count depends on it), caught at the first collective where they part by its header.  Each
rank runs under a small wrapper that records its own exit code."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from test_multi_device_cli import _env, _mpiexec

TIMEOUT = 30  # --collective-timeout: a test that ran into it would take at least this long
# Each rank runs under this wrapper, which records the rank's pid and exit code.
WRAPPER = """import signal, subprocess, sys
signal.signal(signal.SIGINT, lambda *a: None)  # the rank below hears Ctrl-C; not this
import os
p = subprocess.Popen(sys.argv[2:], close_fds=False)  # (the launcher's PMI socket stays open)
open(sys.argv[1] + ".pid", "w").write(str(p.pid))
# MPICH's launcher SIGKILLs this wrapper as soon as another rank ends.  So the wrapper waits
# for its rank's end without reaping it (WNOWAIT), records the code, and only then reaps: killed
# before the record, it leaves the rank unreaped -- an orphan the launcher below reaps with its
# own status; killed after, the record is there.  (An empty file is read as no record.)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)
st = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
rc = st.si_status if st.si_code == os.CLD_EXITED else -st.si_status
os.write(fd, str(rc).encode())
p.wait()
sys.exit(rc)
"""
# mpiexec runs under this launcher, a child subreaper: after Ctrl-C MPICH's launcher SIGKILLs
# whatever of a job is left once one rank has ended -- a wrapper that has not yet written
# its rank's code, though the rank itself ended with 130 -- and the orphaned rank is then
# reaped here, with its own exit status.
LAUNCHER = """import ctypes, json, os, signal, subprocess, sys, time
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
sigint_after, limit = float(sys.argv[1]), float(sys.argv[2])
records = [r for r in sys.argv[3].split(os.pathsep) if r]  # the wrappers' record files
t0 = time.monotonic()
p = subprocess.Popen(sys.argv[4:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     stdin=subprocess.DEVNULL, start_new_session=True)
try:
    if sigint_after >= 0:
        time.sleep(sigint_after)
        os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=limit)
except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    out, err = p.communicate()
took = time.monotonic() - t0
orphans, until = {}, time.monotonic() + 10


def unsettled():  # ranks with neither their wrapper's record nor their own reaped status
    def read(path):
        return open(path).read() if os.path.exists(path) else ""
    return [r for r in records if not read(r) and
            not (read(r + ".pid") and int(read(r + ".pid")) in orphans)]


# Until every rank is accounted for: a wrapper SIGKILLed before its record leaves its rank
# to be reparented here only once the wrapper is gone -- possibly after the launcher's own
# children (mpiexec) have all been reaped, when waitpid has nothing to wait for yet.
while time.monotonic() < until and unsettled():
    try:
        pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        pid = 0
    if pid:
        orphans[pid] = os.waitstatus_to_exitcode(status)
    else:
        time.sleep(0.01)
print(json.dumps({"rc": p.returncode, "out": out, "err": err, "took": took,
                  "orphans": orphans}))
"""

ADD = """HloModule {name}, replica_count={n}

addf {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

adds {{
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}}
"""
ALONE = """
ENTRY e {{
  x = {t}[4] parameter(0)
  ROOT r = {t}[4] all-reduce(x), replica_groups={{}}, to_apply={add}
}}
"""
# Rank 0's devices (replica ids below n / 2) take `first`, rank 1's `second`.
BRANCH = """
ENTRY e {{
  x = f32[4] parameter(0)
  id = u32[] replica-id()
  half = u32[] constant({half})
  c = pred[] compare(id, half), direction=LT
  ROOT r = f32[4] conditional(c, x, x), true_computation=first, false_computation=second
}}
"""
BRANCHES = {
    "dtypes": """
first {{
  p = f32[4] parameter(0)
  rf = f32[4] all-reduce(p), replica_groups={{}}, to_apply=addf
  ROOT n = f32[4] negate(rf)
}}

second {{
  p = f32[4] parameter(0)
  c = s32[4] convert(p)
  rs = s32[4] all-reduce(c), replica_groups={{}}, to_apply=adds
  ROOT f = f32[4] convert(rs)
}}
""",
    "order": """
first {{
  p = f32[4] parameter(0)
  ra = f32[4] all-reduce(p), replica_groups={{}}, to_apply=addf
  ga = f32[{g}] all-gather(ra), replica_groups={{}}, dimensions={{0}}
  ROOT s = f32[4] slice(ga), slice={{[0:4]}}
}}

second {{
  p = f32[4] parameter(0)
  gb = f32[{g}] all-gather(p), replica_groups={{}}, dimensions={{0}}
  s = f32[4] slice(gb), slice={{[0:4]}}
  ROOT rb = f32[4] all-reduce(s), replica_groups={{}}, to_apply=addf
}}
""",
    "shapes": """
first {{
  p = f32[4] parameter(0)
  ROOT r4 = f32[4] all-reduce(p), replica_groups={{}}, to_apply=addf
}}

second {{
  p = f32[4] parameter(0)
  pp = f32[8] concatenate(p, p), dimensions={{0}}
  r8 = f32[8] all-reduce(pp), replica_groups={{}}, to_apply=addf
  ROOT s = f32[4] slice(r8), slice={{[0:4]}}
}}
""",
}
# An all-reduce in a loop of 2 trips on rank 0's devices and 3 on rank 1's, then an
# all-gather: rank 0 reaches the all-gather where rank 1 makes its third all-reduce.
TRIPS = """
cond {{
  p = (s32[], s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  ROOT c = pred[] compare(i, n), direction=LT
}}

body {{
  p = (s32[], s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  x = f32[4] get-tuple-element(p), index=2
  r = f32[4] all-reduce(x), replica_groups={{}}, to_apply=addf
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], s32[], f32[4]) tuple(j, n, r)
}}

ENTRY e {{
  x = f32[4] parameter(0)
  id = u32[] replica-id()
  half = u32[] constant({half})
  late = pred[] compare(id, half), direction=GE
  two = s32[] constant(2)
  three = s32[] constant(3)
  n = s32[] select(late, three, two)
  z = s32[] constant(0)
  t = (s32[], s32[], f32[4]) tuple(z, n, x)
  w = (s32[], s32[], f32[4]) while(t), condition=cond, body=body
  y = f32[4] get-tuple-element(w), index=2
  ROOT g = f32[{g}] all-gather(y), replica_groups={{}}, dimensions={{0}}
}}
"""


def module(kind: str, n: int) -> str:
    """The `kind` disagreement on n devices (2 ranks: one or two devices each); "large":
    "dtypes" on 32768 elements (128 KiB: the headers swap alone, then the payload moves)."""
    fill = {"name": kind, "n": n, "half": n // 2, "g": 4 * n}
    if kind == "large":
        return (ADD + BRANCHES["dtypes"] + BRANCH).format(**fill).replace("[4]", "[32768]")
    body = TRIPS if kind == "trips" else BRANCHES[kind] + BRANCH
    return (ADD + body).format(**fill)


def ranks(tmp_path, *argvs, sigint_after: float = -1, limit: float = 120,
          flags: tuple = ()):
    """mpiexec FLAGS -n 1 A : -n 1 B ... (one xlaplug per argv, each under the wrapper), under
    the launcher; returns (mpiexec's result, each rank's exit code, wall seconds).  With
    `sigint_after`, SIGINT goes to mpiexec's process group that many seconds after the
    start (as Ctrl-C at a terminal)."""
    (tmp_path / "wrap.py").write_text(WRAPPER)
    (tmp_path / "launch.py").write_text(LAUNCHER)
    cmd = [_mpiexec(), *flags]
    codes = [tmp_path / f"rank{i}.rc" for i in range(len(argvs))]
    for i, argv in enumerate(argvs):
        cmd += (([":"] if i else []) + ["-n", "1", sys.executable, str(tmp_path / "wrap.py"),
                str(codes[i]), sys.executable, "-m", "xlaplug.cli", *map(str, argv)])
    run = subprocess.run([sys.executable, str(tmp_path / "launch.py"), str(sigint_after),
                          str(limit), os.pathsep.join(map(str, codes)), *cmd],
                         capture_output=True, text=True, env=_env(),
                         timeout=limit + 30)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout)
    got = []
    for c in codes:  # the wrapper's record, else the orphaned rank's own status
        pid = c.with_name(c.name + ".pid")  # (the wrapper writes RECORD.pid)
        own = c.read_text() if c.exists() else ""
        got.append(int(own) if own else
                   r["orphans"].get(pid.read_text()) if pid.exists() else None)
    assert r["took"] < limit, ("mpiexec did not end", r["err"])
    return subprocess.CompletedProcess(cmd, r["rc"], r["out"], r["err"]), got, r["took"]


def _errors(p) -> list[str]:
    return [ln for ln in p.stderr.splitlines() if "error:" in ln]


def _one_error_every_rank_2(p, codes, took) -> str:
    assert codes == [2, 2], (codes, p.stdout, p.stderr)
    assert p.returncode == 2, p.stderr
    errors = _errors(p)
    assert len(errors) == 1, p.stderr  # one rank reports; the other stops quietly
    assert took < TIMEOUT, took  # found at once, not by waiting out the timeout
    return errors[0]


def test_replicas_that_differ_stop_before_the_communicators_are_split(tmp_path):
    # Used to hang: rank 0 (2 replicas, one device) entered MPI_Comm_split, rank 1 (4
    # replicas, two devices on threads) never did.
    hlo = tmp_path / "m.hlo"
    hlo.write_text(module("dtypes", 2))
    p, codes, took = ranks(tmp_path, ["run", hlo, "--replicas", 2, "--collective-timeout", 10],
                           ["run", hlo, "--replicas", 4, "--collective-timeout", 10])
    error = _one_error_every_rank_2(p, codes, took)
    assert took < 10, took
    assert error.endswith("error: the ranks do not run the same thing: rank 0 has 2 replicas "
                          "x 1 partitions, rank 1 has 4 replicas x 1 partitions (every rank "
                          "must run the same module with the same --replicas, --partitions, "
                          "--repeat and --max-while-iterations)"), error


@pytest.mark.parametrize("other", ["module", "repeat"])
def test_different_modules_or_options_are_named(tmp_path, other):
    # An f32 all-reduce on rank 0 and an s32 one on rank 1 used to exit 0 with garbage.
    f32, s32 = tmp_path / "f32.hlo", tmp_path / "s32.hlo"
    for path, t in ((f32, "f32"), (s32, "s32")):  # the same module but for the type
        path.write_text(ADD.format(name="alone", n=2) + ALONE.format(t=t, add=f"add{t[0]}"))
    second = ["run", s32] if other == "module" else ["run", f32, "--repeat", 2]
    p, codes, took = ranks(tmp_path, ["run", f32, "--collective-timeout", TIMEOUT],
                           second + ["--collective-timeout", TIMEOUT])
    error = _one_error_every_rank_2(p, codes, took)
    if other == "module":
        assert re.search(r"rank 0 has module 'alone' \(fingerprint [0-9a-f]{12}\), rank 1 "
                         r"has module 'alone' \(fingerprint [0-9a-f]{12}\)", error), error
    else:
        assert "rank 0 has --repeat 1, rank 1 has --repeat 2" in error, error
    assert not p.stdout.strip(), p.stdout  # no outputs printed from a mismatched run


@pytest.mark.parametrize("bad_rank", [0, 1])
def test_a_rank_that_fails_before_the_run_is_heard_at_once(tmp_path, bad_rank):
    # Used to hang: the rank whose module did not parse ended before MPI_Init, and the
    # other waited there for good.  Now every rank starts MPI first, and the failed rank's
    # error goes to the others in place of its run header: it reports, they stop.
    good, bad = tmp_path / "good.hlo", tmp_path / "bad.hlo"
    good.write_text(ADD.format(name="alone", n=2) + ALONE.format(t="f32", add="addf"))
    bad.write_text("HloModule bad\nENTRY e {\n  x = f32[4] parameter(0)\n"
                   "  ROOT r = f32[4] frobnicate(x)\n}\n")
    argvs = [["run", good, "--collective-timeout", TIMEOUT]] * 2
    argvs[bad_rank] = ["run", bad, "--collective-timeout", TIMEOUT]
    p, codes, took = ranks(tmp_path, *argvs)
    error = _one_error_every_rank_2(p, codes, took)
    assert error.endswith("bad.hlo:4:19: error: unknown opcode 'frobnicate'"), error


@pytest.mark.slow  # waits out a 5 s timeout
def test_a_rank_whose_options_are_refused_does_not_hold_the_others(tmp_path):
    # Used to hang: rank 1's unknown option ended it before MPI_Init (click refuses it
    # before `run` starts), rank 0 waited there and then in MPI_Comm_dup for good.  Now MPI
    # starts before `run` reads its options and the communicators are duplicated without
    # blocking: rank 0 ends at its timeout, saying not every rank came.
    good = tmp_path / "good.hlo"
    good.write_text(ADD.format(name="alone", n=2) + ALONE.format(t="f32", add="addf"))
    p, codes, took = ranks(tmp_path, ["run", good, "--collective-timeout", 5],
                           ["run", good, "--no-such-option"], limit=60)
    assert codes == [2, 2], (codes, p.stderr)
    assert "No such option '--no-such-option'" in p.stderr, p.stderr
    assert "error: rank 0: start of run: not every rank came within 5 s (a rank that " \
           "ended before its run?)" in p.stderr, p.stderr
    assert took < 5 + 20, took


# What each side had at the first collective where the ranks part.  One device per rank:
# the MPI collectives' header; two per rank: the header of the leaders' point-to-point swap.
EXPECTED = {
    "dtypes": ("all-reduce 'rf' (call 1) f32[4] add", "all-reduce 'rs' (call 1) s32[4] add"),
    "large": ("all-reduce 'rf' (call 1) f32[32768] add",
              "all-reduce 'rs' (call 1) s32[32768] add"),
    "order": ("all-reduce 'ra' (call 1) f32[4] add", "all-gather 'gb' (call 1) (f32[4])"),
    "shapes": ("all-reduce 'r4' (call 1) f32[4] add", "all-reduce 'r8' (call 1) f32[8] add"),
    "trips": ("all-gather 'g' (call 1) (f32[4])", "all-reduce 'r' (call 3) f32[4] add"),
}
EXPECTED_SWAP = {
    "dtypes": ("all-reduce 'rf' (call 1) ((f32[4]), (f32[4]))",
               "all-reduce 'rs' (call 1) ((s32[4]), (s32[4]))"),
    "large": ("all-reduce 'rf' (call 1) ((f32[32768]), (f32[32768]))",
              "all-reduce 'rs' (call 1) ((s32[32768]), (s32[32768]))"),
    "order": ("all-reduce 'ra' (call 1) ((f32[4]), (f32[4]))",
              "all-gather 'gb' (call 1) ((f32[4]), (f32[4]))"),
    "shapes": ("all-reduce 'r4' (call 1) ((f32[4]), (f32[4]))",
               "all-reduce 'r8' (call 1) ((f32[8]), (f32[8]))"),
    "trips": ("all-gather 'g' (call 1) ((f32[4]), (f32[4]))",
              "all-reduce 'r' (call 3) ((f32[4]), (f32[4]))"),
}


@pytest.mark.parametrize("per_rank", [1, 2], ids=["device_per_rank", "two_devices_per_rank"])
@pytest.mark.parametrize("kind", ["dtypes", "large", "order", "shapes", "trips"])
def test_ranks_that_part_at_a_collective_name_both_sides(tmp_path, kind, per_rank):
    hlo = tmp_path / f"{kind}.hlo"
    hlo.write_text(module(kind, 2 * per_rank))
    argv = ["run", hlo, "--collective-timeout", TIMEOUT]
    p, codes, took = ranks(tmp_path, argv, argv)
    error = _one_error_every_rank_2(p, codes, took)
    mine, theirs = (EXPECTED if per_rank == 1 else EXPECTED_SWAP)[kind]
    at = "collective 3" if kind == "trips" else "collective 1"
    # Reported by the rank that holds both headers: either (rank 0 cannot read a longer
    # message than its own, so in "shapes" rank 1 reports).
    assert re.search(r"error: device [01]: ", error), error
    assert f": ranks disagree at {at} over ranks 0, 1: rank 0 has {mine}, " \
           f"rank 1 has {theirs}" in error, error
    assert not p.stdout.strip(), p.stdout


@pytest.mark.slow  # waits 12 s for both ranks to stand at their collectives
def test_ctrl_c_ends_every_rank_with_130(tmp_path):
    # Rank 0 waits at an all-reduce that rank 1 never reaches (rank 1 waits at the end of
    # the run) when Ctrl-C reaches mpiexec: mpiexec forwards it, and every rank ends 130.
    hlo = tmp_path / "waits.hlo"
    hlo.write_text(WAITS)
    argv = ["run", hlo, "--collective-timeout", 100]
    # (12 s: two ranks importing numba on a loaded 2-core machine took more than 6 s to start)
    # MPICH's mpiexec SIGKILLs what is left of a job once one rank has ended non-zero: a rank
    # slower to be scheduled than the other (CI at load 3 on 2 cores) was killed before it
    # could end 130 on its own.  That race is mpiexec's; what is tested here is that each rank
    # ends itself, so the clean-up is off.
    p, codes, took = ranks(tmp_path, argv, argv, sigint_after=12, limit=60,
                           flags=("-disable-auto-cleanup",))
    assert codes == [130, 130], (codes, p.stderr)
    assert p.returncode != 0, (p.stdout, p.stderr)  # (MPICH's own code: 10 with no clean-up)
    assert p.stderr.count("interrupted") == 2, p.stderr
    assert took < 12 + 10, took  # within a second or so of the signal, not at the timeout


WAITS = ADD.format(name="waits", n=2) + """
yes {
  p = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(p), replica_groups={}, to_apply=addf
}

no {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}

ENTRY e {
  x = f32[4] parameter(0)
  id = u32[] replica-id()
  z = u32[] constant(0)
  c = pred[] compare(id, z), direction=EQ
  ROOT r = f32[4] conditional(c, x, x), true_computation=yes, false_computation=no
}
"""
