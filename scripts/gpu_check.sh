#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one go (no network, no installs): ~8 minutes at most.
#
#   bash scripts/gpu_check.sh            # from the repository root (or anywhere)
#
# Sections: environment (nvidia-smi, numba.cuda.detect()), the CUDA test files with the
# simulator off (NUMBA_ENABLE_CUDASIM=0), the benchmark on --device cuda (--quick, then the
# full sizes when enough time is left).  Each step runs under `timeout` so the whole script
# ends within GPU_CHECK_BUDGET seconds (default 470); a step that times out or fails is
# reported and the script goes on.  Exit status: 0 when every step passed, 1 otherwise.
#
# Knobs (environment): GPU_CHECK_BUDGET (seconds, default 470); CORPUS_VARIANTS (default
# "lowered"; "lowered,compiled" runs both forms of the corpus programs); PYTHON (default
# python).  The corpus tests read tests/.corpus_cache (generated with jax when missing:
# carry it to the GPU machine to save that time).
set -u

cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python}
BUDGET=${GPU_CHECK_BUDGET:-470}
START=$SECONDS
STATUS=0
export NUMBA_ENABLE_CUDASIM=0
export JAX_PLATFORMS=cpu          # jax only lowers the test programs; keep it off the GPU
export XLAPLUG_CUDA_CORPUS_VARIANTS=${CORPUS_VARIANTS:-lowered,compiled}
export XLAPLUG_CUDA_CORPUS_ALL=1  # a real GPU takes every corpus program, not just the small ones
export PYTHONUNBUFFERED=1

section() {
    printf '\n======================================================================\n'
    printf '== %s  (t=%ds of %ds)\n' "$1" "$((SECONDS - START))" "$BUDGET"
    printf '======================================================================\n'
}

left() {  # seconds left in the budget, minus a reserve for the steps after this one
    local reserve=${1:-0}
    echo $((BUDGET - (SECONDS - START) - reserve))
}

run_step() {  # run_step NAME SECONDS CMD...
    local name=$1 limit=$2
    shift 2
    if [ "$limit" -lt 10 ]; then
        echo "SKIPPED $name: no time left in the budget"
        STATUS=1
        RESULTS+=("$name: skipped (no time left)")
        return
    fi
    echo "+ timeout ${limit}s $*"
    timeout --kill-after=10 "$limit" "$@"
    local rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "TIMEOUT $name after ${limit}s"
        STATUS=1
    elif [ $rc -ne 0 ]; then
        echo "FAILED $name (exit $rc)"
        STATUS=1
    else
        echo "OK $name"
    fi
    RESULTS+=("$name: rc=$rc")
}
RESULTS=()

section "environment"
date -u
uname -a
if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 30 nvidia-smi || echo "nvidia-smi failed"
else
    echo "nvidia-smi: not found"
fi
timeout 60 "$PY" - <<'EOF' || { echo "numba.cuda is unusable here"; STATUS=1; }
import sys, platform
print("python", platform.python_version(), sys.executable)
import numpy, numba
print("numpy", numpy.__version__, "numba", numba.__version__)
try:
    import jax
    print("jax", jax.__version__)
except Exception as e:  # the tests need it to lower their programs
    print("jax: NOT IMPORTABLE:", e)
from numba import cuda
print("cuda.is_available():", cuda.is_available())
cuda.detect()
if not cuda.is_available():
    sys.exit(1)
EOF
if [ $STATUS -ne 0 ]; then
    echo "no usable GPU: nothing else to check"
    exit 1
fi

section "CUDA tests (NUMBA_ENABLE_CUDASIM=0)"
# every test marked `cuda` (the cuda half of the device-parametrized kernel tests and the
# CUDA-only files), wherever it lives
echo "tests: -m cuda"
# leave ~150 s for the benchmark after this step
run_step "pytest cuda" "$(left 150)" "$PY" -m pytest -q -rfEx --durations=10 \
    -p no:cacheprovider -m cuda tests

section "benchmark --device cuda --quick"
run_step "benchmark quick" "$(left 20)" "$PY" benchmarks/run.py --device cuda --quick --repeat 3

if [ "$(left 0)" -ge 120 ]; then
    section "benchmark --device cuda (full sizes)"
    run_step "benchmark full" "$(left 5)" "$PY" benchmarks/run.py --device cuda --repeat 3
else
    echo
    echo "(full-size benchmark skipped: $(left 0)s left in the budget)"
fi

section "summary"
for r in "${RESULTS[@]}"; do echo "  $r"; done
echo "total $((SECONDS - START))s; overall: $([ $STATUS -eq 0 ] && echo PASS || echo FAIL)"
exit $STATUS
