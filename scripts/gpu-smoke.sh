#!/usr/bin/env bash
# The first run on a GPU machine: every CUDA/NCCL/NVML path of gpuprof, checked against ratios
# the hardware should reach, ending with a verdict that lists every step, and a small run to
# keep as golden data.
#
#   scripts/gpu-smoke.sh [OUT]        (default OUT: reports/gpu-smoke; needs gpuprof installed)
#
# Steps, each run whatever the one before did (a failed step is listed, not fatal):
#   1. gpuprof env                                   versions, GPUs, NICs, topology, preflight
#   2. the standard suite on every visible GPU       every probe, sharded, tp and moe included
#   3. the ci suite on one GPU, 3 runs               what CI gates on
#   4. gpuprof baseline of those runs
#   5. gpuprof check against it (one GPU, a fresh measurement)
#   6. scripts/gpu_smoke_check.py: every result correct (#wrong 0), pinned host-to-device
#      copies at 60-100% of the PCIe x16 rate, device copies and bf16 matmuls at a sane share
#      of the datasheet peak, the sampler's GPUs being the job's, NVLink counters moving during
#      p2p on NVLink machines; it copies the one-GPU ci run to OUT/golden-<gpu> for tests/data/.
#   7. gpuprof check A/B, the same interpreter on both sides (last: the longest step)
# Everything printed also goes to OUT/gpu-smoke.log. Exit 0 when every step passed, 1 when
# one failed, 2 when no GPU is visible. It changes no GPU setting (clocks, persistence, MIG).
# GPU_SMOKE_GPUS=N skips the torch check (the script's own test runs it with a stand-in gpuprof).
# GPU_SMOKE_SUITE=quick GPU_SMOKE_PROBES=collectives,...,tp: step 2 in less time (a short lease);
# GPU_SMOKE_AB_ARGS="--max-pairs 3": more options of the A/B check. Each step's seconds are logged.
set -uo pipefail
OUT=${1:-reports/gpu-smoke}
GPUPROF=${GPUPROF:-gpuprof}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
SUITE=${GPU_SMOKE_SUITE:-standard}
PROBES=()
[ -n "${GPU_SMOKE_PROBES:-}" ] && PROBES=(--probes "$GPU_SMOKE_PROBES")
mkdir -p "$OUT/ci"
LOG="$OUT/gpu-smoke.log"
: >"$LOG"
GPUS=${GPU_SMOKE_GPUS:-$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)}
if [ "${GPUS:-0}" -lt 1 ]; then
    echo "gpu-smoke: torch sees no CUDA GPU (a CPU build of torch, or no driver); nothing to do" >&2
    exit 2
fi
NAMES=()
CODES=()
step() {  # step NAME COMMAND...: run it, its output to the terminal and the log; note its exit
    local name=$1 start=$SECONDS
    shift
    echo "== gpu-smoke: $name" | tee -a "$LOG" >&2
    "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    echo "-- gpu-smoke: $name: exit $rc after $((SECONDS - start)) s" | tee -a "$LOG" >&2
    NAMES+=("$name")
    CODES+=("$rc")
}
echo "gpu-smoke: $GPUS GPU(s) visible; runs under $OUT" | tee -a "$LOG" >&2
step "environment" "$GPUPROF" env
step "$SUITE suite on $GPUS GPU(s)" \
    "$GPUPROF" sweep --gpus "$GPUS" --suite "$SUITE" "${PROBES[@]}" --out "$OUT" --tag "$SUITE" -q
step "ci suite on 1 GPU, 3 runs" \
    "$GPUPROF" sweep --gpus 1 --suite ci --repeats 3 --out "$OUT/ci" --tag ci -q
CI_RUNS=()
for run in "$OUT"/ci/*_ci; do [ -f "$run/run.json" ] && CI_RUNS+=("$run"); done
step "baseline of the ci runs" "$GPUPROF" baseline "${CI_RUNS[@]}" -o "$OUT/baseline.json"
step "check against the baseline" "$GPUPROF" check --baseline "$OUT/baseline.json" \
    --out "$OUT/ci" --junit "$OUT/check.xml"
step "checks against the hardware" "$PYTHON" "$HERE/gpu_smoke_check.py" "$OUT" "$OUT/ci"
if "$GPUPROF" check --help 2>/dev/null | grep -q -- "--reference-python"; then
    # shellcheck disable=SC2086  # GPU_SMOKE_AB_ARGS: more check options, split on spaces
    step "A/B check, one interpreter on both sides" "$GPUPROF" check \
        --reference-python "$(command -v "$PYTHON")" --suite ci --gpus 1 --out "$OUT/ab" \
        ${GPU_SMOKE_AB_ARGS:-}
fi
{
    echo
    echo "gpu-smoke verdict:"
    failed=0
    for i in "${!NAMES[@]}"; do
        if [ "${CODES[$i]}" = 0 ]; then mark="ok    "; else mark="FAILED"; failed=1; fi
        printf '  %s %s%s\n' "$mark" "${NAMES[$i]}" "$([ "${CODES[$i]}" = 0 ] || echo " (exit ${CODES[$i]})")"
    done
    if [ "$failed" = 0 ]; then echo "every step passed"; else echo "some steps failed: see $LOG"; fi
} | tee -a "$LOG"
[ "$(printf '%s\n' "${CODES[@]}" | grep -cv '^0$')" = 0 ]
