"""Rank-side entry points: the sweep worker the launchers start, and one-probe standalone mains.

python -m torch.distributed.run ... -m gpuprof.probes.sweep --run-dir DIR   (launchers)
torchrun --nproc-per-node 4 -m gpuprof.probes.collectives [options]         (by hand)
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

import click
import torch.distributed as dist

from gpuprof import env as gpuenv
from gpuprof.errors import GpuprofError
from gpuprof.options import collectives_options, collectives_params, pop_collectives
from gpuprof.plan import SweepPlan, suite_collectives
from gpuprof.probes import PROBE_MODULES
from gpuprof.probes._harness import Context, attach_shard, init, rank_info, resolve_device
from gpuprof.records import SCHEMA_VERSION
from gpuprof.store import (
    DEFAULT_OUT,
    PLAN_JSON,
    RUN_JSON,
    check_out_dir,
    check_tag,
    create_run_dir,
    read_json,
    update_run_json,
    write_json_atomic,
)


def describe_job(ctx: Context, run_dir: Path) -> None:
    """Gather every rank's identity (and each node's hardware) into run.json on rank 0."""
    mine: dict[str, Any] = {"rank": rank_info(ctx)}
    if ctx.local_rank == 0:
        mine["node"] = gpuenv.node_info(ctx.node_rank)
        mine["node"]["host"] = ctx.host
        mine["node"]["versions"] = gpuenv.versions()
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine)
    if ctx.rank != 0:
        return
    nodes = sorted((g["node"] for g in gathered if "node" in g), key=lambda n: n["node_rank"])
    update_run_json(
        run_dir,
        device=ctx.device.type,
        backend=ctx.backend,
        world_size=ctx.world_size,
        versions=nodes[0]["versions"],
        env=gpuenv.captured_env(),
        nodes=nodes,
        ranks=[g["rank"] for g in gathered],
    )


def execute(ctx: Context, plan: SweepPlan, run_dir: Path) -> None:
    """Run every probe of the plan on this rank."""
    describe_job(ctx, run_dir)
    for probe in plan.probes:
        module = importlib.import_module(PROBE_MODULES[probe])
        module.run(ctx, getattr(plan, probe), plan.num_nodes, plan.gpus_per_node)


def worker_main(argv: list[str] | None = None) -> None:
    """The process every launcher starts on every rank."""
    parser = argparse.ArgumentParser(prog="gpuprof.probes.sweep")
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    plan = SweepPlan.from_dict(read_json(args.run_dir / PLAN_JSON))
    ctx = init(args.run_dir, plan.device, plan.case_timeout_s)
    execute(ctx, plan, args.run_dir)
    dist.destroy_process_group()


def new_run_record(
    plan: SweepPlan, run_dir: Path, argv: list[str], launcher: str
) -> dict[str, Any]:
    """The run.json a run starts with; ranks add nodes and versions, the end adds status."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_dir.name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": argv,
        "gpuprof_version": gpuenv.gpuprof_version(),
        "launcher": launcher,
        "num_nodes": plan.num_nodes,
        "gpus_per_node": plan.gpus_per_node,
        "world_size": plan.world_size,
        "device": plan.device,
        "backend": "nccl" if plan.device == "cuda" else "gloo",
        "suite": plan.suite,
        "probes": list(plan.probes),
        "status": "running",
        "failures": [],
    }


def start_run(plan: SweepPlan, out: Path, tag: str, argv: list[str], launcher: str) -> Path:
    """Create the run folder with plan.json and run.json (status running)."""
    run_dir = create_run_dir(out, tag)
    write_json_atomic(run_dir / PLAN_JSON, plan.to_dict())
    write_json_atomic(run_dir / RUN_JSON, new_run_record(plan, run_dir, argv, launcher))
    return run_dir


def _standalone(
    probe: str, out: str, tag: str, device: str, suite: str, timeout: float, opts: dict[str, Any]
) -> None:
    world, local = gpuenv.torchrun_sizes()
    resolved = resolve_device(device)
    params = collectives_params(suite_collectives(suite, resolved), opts)
    plan = SweepPlan(
        num_nodes=max(1, world // local),
        gpus_per_node=local,
        device=resolved,
        suite=suite,
        probes=(probe,),
        case_timeout_s=timeout,
        **{probe: params},
    )
    check_out_dir(Path(out))
    check_tag(tag)
    ctx = init(None, resolved, timeout)
    box: list[Any] = [None]
    if ctx.rank == 0:
        box[0] = str(start_run(plan, Path(out), tag, sys.argv, "torchrun"))
    dist.broadcast_object_list(box, src=0)
    run_dir = Path(box[0])
    attach_shard(ctx, run_dir)
    execute(ctx, plan, run_dir)
    if ctx.rank == 0:
        from gpuprof.launch import finish_run

        finish_run(run_dir, returncode=0, print_table=True)
    dist.destroy_process_group()


def standalone_main(probe: str, argv: list[str] | None = None) -> None:
    """`torchrun ... -m gpuprof.probes.<probe>`: measure one probe and print its table."""

    @click.command(name=f"gpuprof.probes.{probe}")
    @collectives_options
    @click.option("--out", default=str(DEFAULT_OUT), show_default=True)
    @click.option("--tag", default=probe, show_default=True)
    @click.option("--device", default="auto", type=click.Choice(["auto", "cuda", "cpu"]))
    @click.option("--suite", default="quick", type=click.Choice(["quick", "standard", "full"]))
    @click.option("--timeout", default=300.0, show_default=True, help="seconds per case")
    def command(**kwargs: Any) -> None:
        opts = pop_collectives(kwargs)
        try:
            _standalone(probe, opts=opts, **kwargs)
        except GpuprofError as exc:
            print(f"gpuprof: error: {exc.one_line()}", file=sys.stderr)
            sys.exit(exc.exit_code)

    command.main(args=argv, standalone_mode=True)


if __name__ == "__main__":
    worker_main()
