#!/usr/bin/env bash
# The first run on a GPU machine: every CUDA/NCCL/NVML path of gpuprof, checked against ratios
# the hardware should reach, with a short verdict and a small run to keep as golden data.
#
#   scripts/gpu-smoke.sh [OUT]        (default OUT: reports/gpu-smoke; needs gpuprof installed)
#
# On one GPU: `gpuprof env`, a quick sweep of collectives, memory and compute, and the NVML
# sampler throughout. With more than one visible GPU, also a quick sweep of every probe on
# all of them (p2p included, so NVLink counters should move). Then
# scripts/gpu_smoke_check.py reads the runs and checks: every result correct (#wrong 0),
# pinned host-to-device copies at 60-100% of the PCIe generation's x16 rate, device copies
# and bf16 matmuls at a sane share of the datasheet peak, the sampler's GPUs being the job's,
# and NVLink counters moving during p2p on NVLink machines. Exit 0 when every check passes.
# It changes no GPU setting (clocks, persistence, MIG).
set -euo pipefail
OUT=${1:-reports/gpu-smoke}
GPUPROF=${GPUPROF:-gpuprof}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu-smoke: torch sees no CUDA GPU (a CPU build of torch, or no driver); nothing to do" >&2
    exit 2
fi
GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')
echo "gpu-smoke: $GPUS GPU(s) visible; runs under $OUT" >&2
"$GPUPROF" env | tee "$OUT/env.txt"
"$GPUPROF" sweep --gpus 1 --suite quick --probes collectives,memory,compute \
    --out "$OUT" --tag one-gpu
if [ "$GPUS" -gt 1 ]; then
    "$GPUPROF" sweep --gpus "$GPUS" --suite quick --out "$OUT" --tag all-gpus
fi
exec "$PYTHON" "$(dirname "$0")/gpu_smoke_check.py" "$OUT"
