#!/bin/bash
# torchyard's suites on a GPU machine that has its own stack and no Docker (the project's lent machines):
# what the machine is; then, side by side, AOTInductor's own round trip on the device (benchmarks/aoti_load.py)
# and, on separate halves of the cores, `benchmarks/suites.py --in-place
# ENTRY` (cold, warm, untrusted after warm, one case changed, replayed) and the ops suite's sweep in place
# (examples/zoo's OPS_ENTRY, its expectations collected: a machine's stack has no file); then one run with two
# xdist workers, each pinned to a visible GPU (both to the one GPU where there is one). Run from anywhere;
# everything it measures goes to $OUT (default reports/device).
#
#   ENTRY      the matrix entry (default cuda)
#   OPS_ENTRY  the zoo's ops entry to sweep in place (default ops); OPS the operators it sweeps: quick,
#              all, or op_db names, comma-separated (default quick)
#   SUITES     the entry's suites to run, space-separated (default: all of them, the runtime suite left
#              out where the interpreter has neither ExecuTorch nor Torch-TensorRT)
#   PYTHON     the machine's interpreter, with torch and pytest (default python3)
#   WHEELS     a folder of wheels for what torchyard's host side imports and the machine lacks (the docker
#              SDK, pathspec), installed into a folder of their own with no index (default .whl; skipped if
#              absent)
#   BENCH_S, OPS_S, WORKERS_S, AOTI_S  each stage's time limit in seconds (default 300, 300, 150 and 300;
#              0 skips the stage): a cut-off stage says so
#
# Exit status: the first stage that failed.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
ENTRY=${ENTRY:-cuda}
OPS_ENTRY=${OPS_ENTRY:-ops}
OPS=${OPS:-quick}
read -ra chosen <<< "${SUITES:-}"
suites=()
for suite in "${chosen[@]}"; do suites+=(--suite "$suite"); done
if [ -z "${SUITES:-}" ] &&
    ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("executorch") or u.find_spec("torch_tensorrt")))'; then
    suites=(--suite export --suite compile --suite parity --suite train)
    echo "neither ExecuTorch nor Torch-TensorRT here: the runtime suite is left out" >&2
fi
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
OUT=${OUT:-reports/device}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
export PYTHONUNBUFFERED=1
site=$(mktemp -d /tmp/torchyard-site.XXXXXX) || exit 2
trap 'rm -rf "$site"' EXIT
if [ -d "$WHEELS" ]; then
    if "$PYTHON" -m pip --version >/dev/null 2>&1; then
        "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
            "$WHEELS"/*.whl || exit 2
    else  # a venv made by uv has no pip
        uv pip install --quiet --python "$PYTHON" --no-index --no-deps --target "$site" "$WHEELS"/*.whl || exit 2
    fi
fi
export PYTHONPATH="$site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
started=$SECONDS
status=0
stage() {  # a stage's name and exit status (124: cut off at its time limit)
    echo "== $1: exit $2 after $((SECONDS - started)) s" | tee -a "$OUT/stages.log"
    ((status)) || status=$2
}

{
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv
    echo "cores: $(nproc)"
    "$PYTHON" - <<'PY'
import importlib.metadata as metadata
import sys

import torch

print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "hip", torch.version.hip)
for name in ("pytest", "pytest-xdist", "triton", "executorch", "torch-tensorrt", "tensorrt", "numpy"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "not installed")
if torch.cuda.is_available():
    print("devices:", [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())])
PY
} 2>&1 | tee "$OUT/machine.log"
stage machine $?

# The halves of the cores, where taskset is there: each run's compiles on its own cores.
half=$(($(nproc) / 2))
first=() second=()
if command -v taskset >/dev/null && ((half > 0)); then
    first=(taskset -c "0-$((half - 1))") second=(taskset -c "$half-$(($(nproc) - 1))")
fi
skipped() { echo "== $1: skipped (its time limit is 0)" | tee -a "$OUT/stages.log"; }

bench() {
    "${first[@]}" timeout "$BENCH_S" "$PYTHON" benchmarks/suites.py --in-place "$ENTRY" --repeats 1 --keep-going \
        "${suites[@]}" > "$OUT/bench.log" 2>&1
}
ops() {  # in the zoo, whose matrix has the ops entries; the reports and cache are its own
    local begun=$SECONDS code
    (cd examples/zoo && "${second[@]}" timeout "$OPS_S" "$PYTHON" -m torchyard test --in-place --entry "$OPS_ENTRY" \
        --reports "$OUT/ops" -- "--torchyard-ops-operators=$OPS" --collect-expectations -rfEs) > "$OUT/ops.log" 2>&1
    code=$?
    echo "ops stage: exit $code after $((SECONDS - begun)) s of its own" >> "$OUT/ops.log"
    return "$code"
}
BENCH_S=${BENCH_S:-300} OPS_S=${OPS_S:-300} AOTI_S=${AOTI_S:-300}
((AOTI_S)) && { timeout "$AOTI_S" "$PYTHON" benchmarks/aoti_load.py > "$OUT/aoti.log" 2>&1 & aoti_pid=$!; }
((BENCH_S)) && { bench & bench_pid=$!; }
((OPS_S)) && { ops & ops_pid=$!; }
if ((BENCH_S)); then
    wait "$bench_pid"
    stage "cold, warm, untrusted, one case changed, replayed (benchmarks/suites.py, on cores ${first[*]:-all})" $?
    grep -E '^\| |^- torchyard|passed|failed' "$OUT/bench.log" | tail -20
    cp "reports/$ENTRY-in-place/parity.json" "$OUT/parity.json" 2>/dev/null
else
    skipped "benchmarks/suites.py"
fi
if ((OPS_S)); then
    wait "$ops_pid"
    stage "ops suite, $OPS operators, expectations collected ($OPS_ENTRY, on cores ${second[*]:-all})" $?
    tail -5 "$OUT/ops.log"
else
    skipped "ops suite"
fi

if ((AOTI_S)); then
    wait "$aoti_pid"
    stage "AOTInductor's own compile and load on the device (benchmarks/aoti_load.py)" $?
    grep '^==' "$OUT/aoti.log"
else
    skipped "benchmarks/aoti_load.py"
fi

visible=${CUDA_VISIBLE_DEVICES:-0}
WORKERS_S=${WORKERS_S:-150}
if ((WORKERS_S)); then
    CUDA_VISIBLE_DEVICES=$visible timeout "$WORKERS_S" "$PYTHON" -m torchyard test --in-place --entry "$ENTRY" \
        "${suites[@]}" -- -n 2 --dist loadgroup -rfEs > "$OUT/workers.log" 2>&1
    stage "two workers (CUDA_VISIBLE_DEVICES=$visible)" $?
    tail -5 "$OUT/workers.log"
    cp "reports/$ENTRY-in-place/parity.json" "$OUT/workers-parity.json" 2>/dev/null
else
    skipped "two workers"
fi
exit "$status"
