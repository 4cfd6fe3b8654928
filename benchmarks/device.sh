#!/bin/bash
# torchyard's suites on a GPU machine that has its own stack and no Docker (the project's lent machines):
# what the machine is, then `benchmarks/suites.py --in-place ENTRY` (cold, warm, one case changed,
# replayed), then one run with two xdist workers, each pinned to a visible GPU (both to the one GPU where
# there is one). Run from anywhere; everything it measures goes to $OUT (default reports/device).
#
#   ENTRY    the matrix entry (default cuda)
#   PYTHON   the machine's interpreter, with torch and pytest (default python3)
#   WHEELS   a folder of wheels for what torchyard's host side imports and the machine lacks (the docker
#            SDK, pathspec), installed into a folder of their own with no index (default .whl; skipped if
#            absent)
#   BENCH_S, WORKERS_S  each stage's time limit in seconds (default 300 and 150): a cut-off stage says so
#
# The runtime suite needs ExecuTorch or Torch-TensorRT: where the interpreter has neither, it is left out
# (`--suite`), and the script says so. Exit status: the first stage that failed.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
ENTRY=${ENTRY:-cuda}
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
OUT=${OUT:-reports/device}
mkdir -p "$OUT" || exit 2
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

suites=(--suite export --suite compile --suite parity)
if "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("executorch") or u.find_spec("torch_tensorrt")))'; then
    suites=()
else
    echo "neither ExecuTorch nor Torch-TensorRT here: the runtime suite is left out" | tee -a "$OUT/stages.log"
fi

timeout "${BENCH_S:-300}" "$PYTHON" benchmarks/suites.py --in-place "$ENTRY" --repeats 1 --keep-going "${suites[@]}" \
    > "$OUT/bench.log" 2>&1
stage "cold, warm, one case changed, replayed (benchmarks/suites.py)" $?
grep -E '^\| |^- torchyard|passed|failed' "$OUT/bench.log" | tail -20
cp "reports/$ENTRY-in-place/parity.json" "$OUT/parity.json" 2>/dev/null

visible=${CUDA_VISIBLE_DEVICES:-0}
CUDA_VISIBLE_DEVICES=$visible timeout "${WORKERS_S:-150}" "$PYTHON" -m torchyard test --in-place --entry "$ENTRY" \
    "${suites[@]}" -- -n 2 --dist loadgroup -rfEs > "$OUT/workers.log" 2>&1
stage "two workers (CUDA_VISIBLE_DEVICES=$visible)" $?
tail -5 "$OUT/workers.log"
cp "reports/$ENTRY-in-place/parity.json" "$OUT/workers-parity.json" 2>/dev/null
exit "$status"
