#!/usr/bin/env bash
# The GPU proof in one `run` call on the GPU machine (docs/GPU.md), for a session whose device time is short (15
# minutes, the machine's start and the two staging runs included): the third run of ../shared/gpu/README.md carries
# .gpu/p3, .gpu/setup.sh and .gpu-models and runs `bash bench/gpu/proof.sh SECONDS`. In that order, each part cut
# short so that the ones after it still run within SECONDS:
#   1. CUDA workers start (forked by the zygote, and exec'd): bench/gpu/run.py's `start` step;
#   2. the tests that touch the GPU path (the `gpu`-marked one measures on the GPU present);
#   3. `registry tune` of the small BERT, `transfer` of its sibling from that registry, `registry check` of both,
#      every model's outputs on the GPU against onnxruntime's, and the end-to-end timings (bench/gpu/run.py).
# Everything comes back under $OUT: the GPU's name, the test log, run.py's log and a tar of its step files.
set -u
LIMIT=${1:-420}
OUT=${OUT:-/tmp/proof-out}
W=/tmp/gb
mkdir -p "$OUT" "$W"
T0=$SECONDS
left() { echo $((LIMIT - (SECONDS - T0))); }
source bench/gpu/device_env.sh || exit 1
export REGISTRY_COMMIT=${REGISTRY_COMMIT:-unknown}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
python3 bench/gpu/run.py --work "$W" start 2>&1 | tee "$OUT/run.log"
timeout $(($(left) - 200)) python3 -P -m pytest -q -p no:cacheprovider --import-mode=append tests/test_cuda.py tests/test_cuda_pipeline.py \
  tests/test_measure.py -k "gpu or exec or torch or zygote or h100 or build or default or compil" > "$OUT/pytest.txt" 2>&1
echo "pytest rc=$? at $((SECONDS - T0)) s" >> "$OUT/pytest.txt"
python3 bench/gpu/run.py --work "$W" --seconds 45 --until $(($(left) - 90)) tune-h128 transfer check outputs e2e \
  2>&1 | tee -a "$OUT/run.log"
python3 bench/gpu/run.py --work "$W" --out "$OUT/gpu.json" report 2>&1 | tee -a "$OUT/run.log"
tar czf "$OUT/steps.tgz" -C "$W" $(cd "$W" && ls *.json 2>/dev/null)
echo "proof done in $((SECONDS - T0)) s"
