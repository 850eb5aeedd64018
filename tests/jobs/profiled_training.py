"""Three recorded training steps on CPU as a user records them (`record_shapes=True`): an MLP
(Linear 256-512, ReLU, Linear 512-256, batch 64) or a small convolutional net (Conv2d 3-8
3x3 stride 2 pad 1, ReLU, Conv2d 8-16 3x3 pad 1 groups 2, Linear 4096-10, batch 4 x 3 x 32 x
32): the traces whose FLOPs `tests/test_traces.py` counts by hand.

    python tests/jobs/profiled_training.py OUT_DIR {mlp,conv} [all]

`all` records with every option too: with_stack, profile_memory, with_flops.
"""

from __future__ import annotations

import sys

import torch


def main(out: str, kind: str, options: bool) -> None:
    torch.manual_seed(0)
    if kind == "mlp":
        model: torch.nn.Module = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)
        )
        batch = torch.randn(64, 256)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, padding=1, groups=2),
            torch.nn.Flatten(),
            torch.nn.Linear(16 * 16 * 16, 10),
        )
        batch = torch.randn(4, 3, 32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        record_shapes=True,
        with_stack=options,
        profile_memory=options,
        with_flops=options,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(out),
    ) as prof:
        for _ in range(4):
            opt.zero_grad()
            model(batch).square().mean().backward()
            opt.step()
            prof.step()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:] == ["all"])
