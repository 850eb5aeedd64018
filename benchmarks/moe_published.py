"""The MoE layer's prediction (gpuprof.predict.moe) against published expert-parallel and
all_to_all figures.

    python benchmarks/moe_published.py

1. Equal splits are NCCL's all_to_all (tests/test_moe.py proves the reduction): the
   published nccl-tests alltoall tables at two or more node counts, calibrated at the
   smallest node count across nodes and scored at the larger (gpuprof.predict.published,
   the same held-out method as docs/validation.md), beside the preset alone.
2. DeepEP (deepseek-ai/DeepEP, docs/legacy.md at dd758caf451848bd150e1046af3d0a73e5fff38d,
   the V1 tables; H800 with ~160 GB/s NVLink and one CX7 400 Gbit/s NIC a GPU):
   - normal kernels (4096 tokens, 7168 hidden, top-8 experts, FP8 dispatch, BF16 combine):
     the "bottleneck bandwidth (RDMA)" at EP 16, 32, 64 against the predicted busiest rank's
     bytes from other nodes over the dispatch (and the combine);
   - low-latency kernels (128 tokens, the same layer, pure RDMA): the latency at EP 16-256
     against the predicted dispatch and combine times.
   DeepEP is not NCCL: its normal kernels send a token once per node (NVLink forwarding
   inside it, top-4 node groups) and its low-latency kernels send even a node's own traffic
   over the NIC; the rows show how far NCCL's point-to-point all_to_all is from them.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuprof.machine.systems import load_system
from gpuprof.predict.moe import MoEBasis, predict_moe
from gpuprof.predict.network import SystemNetwork
from gpuprof.predict.published import BOUND, held_out

DEEPEP = (
    "https://github.com/deepseek-ai/DeepEP/blob/dd758caf451848bd150e1046af3d0a73e5fff38d/"
    "docs/legacy.md"
)
# EP ranks -> (dispatch, combine) bottleneck bandwidth GB/s (RDMA), normal kernels
NORMAL = {16: (43.0, 43.0), 32: (58.0, 57.0), 64: (51.0, 50.0)}
# EP ranks -> (dispatch, combine) latency us, low-latency kernels
LOW_LATENCY = {
    16: (118.0, 195.0),
    32: (155.0, 273.0),
    64: (173.0, 314.0),
    128: (192.0, 369.0),
    256: (194.0, 360.0),
}


def basis(tokens: int, dtype: str) -> MoEBasis:
    """DeepSeek-V3's layer: 7168 values a token, top-8 of 256 experts, uniform routing."""
    return MoEBasis(
        label="0", weights=(), tokens=tokens, hidden=7168, dtype=dtype, top_k=8,
        experts_per_rank=1, capacity_factor=0.0, placement="contiguous", nodes=1, gpus=8,
        dispatch_us=0.0, combine_us=0.0,
    )  # fmt: skip


def main() -> int:
    print("1. nccl-tests alltoall, held out by scale (equal splits: the MoE dispatch's model)")
    scored, _ = held_out()
    mine = [h for h in scored if h.row["op"] == "all_to_all"]
    for h in mine:
        print(
            f"  {h.row['system'][:44]:44} {h.calibrated_at}->{h.row['nodes']:>3} nodes "
            f"{int(h.row['size_bytes']):>12} B: published {h.published:10.1f} us, "
            f"calibrated {100 * h.error:+6.1f}%, preset {100 * h.preset_error:+6.1f}%"
        )
    within = sum(abs(h.error) <= BOUND for h in mine)
    median = statistics.median(abs(h.error) for h in mine)
    print(f"  {within} of {len(mine)} within 15% calibrated (median |error| {100 * median:.1f}%)")

    # H800: DGX H100's node with 8 NVLink links a GPU (~160 GB/s NVLink in DeepEP's words)
    h800 = replace(load_system("dgx-h100"), name="h800", nvlink_links=8, nvls=False)
    net = SystemNetwork(h800)
    print(f"\n2. DeepEP V1 ({DEEPEP}), predicted on {h800.name} (dgx-h100 with 8 NVLink links)")
    errors = []
    for ep, (dispatch_bw, combine_bw) in NORMAL.items():
        nodes = ep // 8
        fp8 = predict_moe([basis(4096, "float8_e4m3fn")], net, (nodes,), 8, "nccl", 256, [])
        bf16 = predict_moe([basis(4096, "bfloat16")], net, (nodes,), 8, "nccl", 256, [])
        got_d, got_c = float(fp8["net_gbps"].iloc[0]), float(bf16["net_gbps"].iloc[0])
        errors += [got_d / dispatch_bw - 1, got_c / combine_bw - 1]
        print(
            f"  normal EP {ep:3}: bottleneck bandwidth dispatch {got_d:5.1f} GB/s predicted "
            f"against {dispatch_bw:g} published ({100 * (got_d / dispatch_bw - 1):+.0f}%), "
            f"combine {got_c:5.1f} against {combine_bw:g} ({100 * (got_c / combine_bw - 1):+.0f}%)"
        )
    for ep, (dispatch_us, combine_us) in LOW_LATENCY.items():
        nodes = ep // 8
        fp8 = predict_moe([basis(128, "float8_e4m3fn")], net, (nodes,), 8, "nccl", 256, [])
        bf16 = predict_moe([basis(128, "bfloat16")], net, (nodes,), 8, "nccl", 256, [])
        got_d, got_c = float(fp8["dispatch_us"].iloc[0]), float(bf16["dispatch_us"].iloc[0])
        errors += [got_d / dispatch_us - 1, got_c / combine_us - 1]
        print(
            f"  low-latency EP {ep:3}: dispatch {got_d:6.1f} us predicted against "
            f"{dispatch_us:g} published ({100 * (got_d / dispatch_us - 1):+.0f}%), combine "
            f"{got_c:6.1f} against {combine_us:g} ({100 * (got_c / combine_us - 1):+.0f}%)"
        )
    within = sum(abs(e) <= BOUND for e in errors)
    print(f"  {within} of {len(errors)} DeepEP figures within 15%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
