"""Rank-side entry points: the sweep worker the launchers start, and the measuring part of a
job torchrun started by hand (`gpuprof sweep` or `-m gpuprof.probes.<probe>` under torchrun).

python -m torch.distributed.run ... -m gpuprof.probes.sweep --run-dir DIR   (launchers)

This module neither launches nor reports: the launcher side (`gpuprof.launch.runner`) does.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gpuprof import registry
from gpuprof.machine import node as machine_node
from gpuprof.machine.env import LAUNCHER_PID_ENV, captured_env
from gpuprof.machine.topology import normalize_bus_id
from gpuprof.probes._harness import Context, attach_shard, init
from gpuprof.runs.plan import SweepPlan
from gpuprof.runs.records import RANKS_DIR
from gpuprof.runs.store import PLAN_JSON, RESUME_JSON, read_json, start_run, update_run_json
from gpuprof.telemetry import sampler as telemetry


def rank_info(ctx: Context) -> dict[str, Any]:
    """This rank's identity for run.json `ranks`, its GPU named by UUID and PCI bus id."""
    info: dict[str, Any] = {
        "rank": ctx.rank,
        "local_rank": ctx.local_rank,
        "node_rank": ctx.node_rank,
        "host": ctx.host,
        "device": str(ctx.device),
        "pid": os.getpid(),
    }
    if ctx.device.type == "cuda":
        props = torch.cuda.get_device_properties(ctx.device)
        info["gpu_name"] = props.name
        uuid = str(getattr(props, "uuid", ""))  # torch prints it bare: b61e325a-d558-...
        known = not uuid or uuid.startswith(("GPU-", "MIG-"))
        info["gpu_uuid"] = uuid if known else f"GPU-{uuid}"  # NVML's form, as in nodes[].gpus
        bus = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
        if None not in bus:  # NVML's form (upper case), so it joins the NVML topology
            info["pci_bus_id"] = normalize_bus_id(f"{bus[0]:x}:{bus[1]:x}:{bus[2]:x}.0")
    return info


def describe_job(
    ctx: Context, plan: SweepPlan, run_dir: Path
) -> tuple[list[str], list[dict[str, Any]]]:
    """Gather every rank's identity and each node's hardware into run.json on the home rank;
    return the preflight problems (the same list on every rank) and every rank's identity."""
    mine: dict[str, Any] = {"rank": rank_info(ctx)}
    if ctx.local_rank == 0:
        mine["node"] = machine_node.node_info(ctx.node_rank)
        mine["node"]["host"] = ctx.host
        mine["node"]["versions"] = machine_node.versions()
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine)
    nodes = sorted((g["node"] for g in gathered if "node" in g), key=lambda n: n["node_rank"])
    problems = preflight(plan, nodes, ctx.world_size, ctx.local_world_size)
    if ctx.rank == ctx.home_rank:
        update_run_json(
            run_dir,
            device=ctx.device.type,
            backend=ctx.backend,
            world_size=ctx.world_size,
            versions=nodes[0]["versions"],
            env=captured_env(),
            nodes=nodes,
            ranks=[g["rank"] for g in gathered],
            preflight=problems,
        )
    return problems, [g["rank"] for g in gathered]


def execute(ctx: Context, plan: SweepPlan, run_dir: Path) -> None:
    """Run every probe of the plan on this rank (after the preflight checks pass)."""
    problems, ranks = describe_job(ctx, plan, run_dir)
    _label_shared_hosts(ctx, ranks)
    if problems:
        if ctx.rank == ctx.home_rank:
            ctx.writer.write(
                {
                    "type": "failure",
                    "probe": "preflight",
                    "case_id": None,
                    "rank": ctx.rank,
                    "host": ctx.host,
                    "error": "; ".join(problems),
                }
            )
        raise PreflightError("; ".join(problems))
    # NVML lists every GPU of the machine: the sampler keeps this node's ranks' GPUs
    buses = [
        r["pci_bus_id"] for r in ranks if r["node_rank"] == ctx.node_rank and r.get("pci_bus_id")
    ]
    sampler = _start_telemetry(ctx, plan, run_dir, buses or None)
    try:
        for probe in plan.probes:
            module = importlib.import_module(registry.get(probe).rank_module)
            module.run(ctx, plan.params[probe], plan.num_nodes, plan.gpus_per_node)
    finally:
        if sampler is not None:
            telemetry.stop(sampler)
    if ctx.shipper is not None:
        ctx.shipper.ship()  # the telemetry written after the last scope


def _label_shared_hosts(ctx: Context, ranks: list[dict[str, Any]]) -> None:
    """Nodes that share a host name (cloned VMs, containers) get `<name>-n<node rank>` as
    their label in every record, so tables, telemetry and p2p classes keep them apart;
    run.json keeps the real names with each node's rank."""
    names = {int(r["node_rank"]): str(r["host"]) for r in ranks}
    if len(set(names.values())) < len(names):
        ctx.host = f"{names[ctx.node_rank]}-n{ctx.node_rank}"


def _start_telemetry(
    ctx: Context, plan: SweepPlan, run_dir: Path, bus_ids: list[str] | None
) -> Any:
    """Local rank 0 starts its node's sampler before the first probe (and ships its file)."""
    if plan.telemetry_hz <= 0 or ctx.local_rank != 0:
        return None
    path = telemetry.telemetry_path(run_dir, ctx.node_rank)
    proc = telemetry.start(run_dir, ctx.host, plan.telemetry_hz, bus_ids, ctx.node_rank)
    if ctx.shipper is not None:
        ctx.shipper.add(path)
    deadline = time.monotonic() + 10
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the first sample lands before the first probe
    return proc


class PreflightError(RuntimeError):
    """The nodes do not match each other or the plan; nothing was measured."""


def join_job(
    ctx: Context,
    *,
    run_dir: Path | None,
    out: Path | None,
    home_capable: bool,
    handoff: Path | None = None,
) -> tuple[SweepPlan, Path]:
    """Agree on the home rank (the first that holds the run folder), receive the plan from it,
    and open this rank's shard in the run folder of the same name on this node."""
    flags: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(flags, bool(home_capable and run_dir is not None))
    candidates = [rank for rank, flag in enumerate(flags) if flag]
    if not candidates:
        raise RuntimeError("no rank holds the run folder: start node 0 with --run-dir --home")
    home = candidates[0]
    box: list[Any] = [None, None, None]
    if ctx.rank == home:
        assert run_dir is not None
        resume = run_dir / RESUME_JSON
        done = read_json(resume)["completed"] if resume.exists() else []
        box = [read_json(run_dir / PLAN_JSON), str(run_dir), done]
    dist.broadcast_object_list(box, src=home)
    plan = SweepPlan.from_dict(box[0])
    ctx.completed = {tuple(key) for key in box[2]}
    if run_dir is None:
        assert out is not None, "a rank needs --run-dir or --out"
        run_dir = out / Path(box[1]).name
    (run_dir / RANKS_DIR).mkdir(parents=True, exist_ok=True)
    attach_shard(ctx, run_dir, home)
    if handoff is not None and ctx.local_rank == 0:
        handoff.write_text(str(run_dir), "utf-8")
    return plan, run_dir


LAUNCHER_CHECK_S = 1.0


def watch_launcher(pid: int, rank: int) -> None:
    """End this rank (exit 4) soon after the launcher that supervises it is gone (killed by
    SIGKILL or the OOM killer): torchrun then ends too, so nothing runs on as an orphan."""

    def loop() -> None:
        while True:
            time.sleep(LAUNCHER_CHECK_S)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print(
                    f"gpuprof: rank {rank}: the launcher (pid {pid}) is gone; stopping",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(4)
            except PermissionError:
                continue  # alive, another user's pid

    threading.Thread(target=loop, name="gpuprof-launcher-watch", daemon=True).start()


def worker_main(argv: list[str] | None = None) -> None:
    """The process every launcher starts on every rank."""
    parser = argparse.ArgumentParser(prog="gpuprof.probes.sweep")
    parser.add_argument("--run-dir", type=Path, help="the run folder (node 0, or shared)")
    parser.add_argument("--out", type=Path, help="where this node keeps its copy of the run")
    parser.add_argument("--home", action="store_true", help="this node collects the records")
    parser.add_argument("--home-host", help="the host that collects the records")
    parser.add_argument("--handoff", type=Path, help="file to write this node's run folder in")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    ctx = init(None, args.device, args.timeout)
    if os.environ.get(LAUNCHER_PID_ENV):
        watch_launcher(int(os.environ[LAUNCHER_PID_ENV]), ctx.rank)
    capable = args.home or (args.home_host is not None and ctx.host == args.home_host)
    plan, run_dir = join_job(
        ctx, run_dir=args.run_dir, out=args.out, home_capable=capable, handoff=args.handoff
    )
    try:
        execute(ctx, plan, run_dir)
    except PreflightError as exc:
        ctx.log(f"gpuprof: preflight failed: {exc}")
        sys.exit(1)
    dist.barrier()  # every rank is done with every group before any tears down
    dist.destroy_process_group()
    # Everything is written, fsynced and shipped. Skip the interpreter's teardown: a C++
    # thread left by the pipelining or gloo objects can abort it ("terminate called without
    # an active exception", seen after pipeline runs) and turn a complete run into a failure.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def preflight(
    plan: SweepPlan, nodes: list[dict[str, Any]], world_size: int, local_world_size: int
) -> list[str]:
    """Problems that must stop a sweep before any probe: mismatched versions, missing GPUs."""
    problems = []
    if world_size != plan.world_size or local_world_size != plan.gpus_per_node:
        problems.append(
            f"the job has {world_size} ranks, {local_world_size} per node; the plan "
            f"asks for {plan.num_nodes} x {plan.gpus_per_node}"
        )
    for key in ("torch", "cuda", "nccl", "driver", "gpuprof"):
        seen = {str(n["versions"].get(key)): n["host"] for n in nodes}
        if len(seen) > 1:
            detail = ", ".join(f"{v} on {h}" for v, h in seen.items())
            problems.append(f"{key} versions differ between nodes: {detail}")
    if plan.device == "cuda":
        for node in nodes:
            if len(node["gpus"]) < plan.gpus_per_node:
                problems.append(
                    f"{node['host']} has {len(node['gpus'])} GPU(s), the sweep asks "
                    f"for {plan.gpus_per_node} per node"
                )
    return problems


def run_inline(plan: SweepPlan, out: Path, tag: str, argv: list[str]) -> Path | None:
    """Run as one rank of a job someone else launched (torchrun by hand): rank 0 creates the
    run folder; every rank measures. Returns the run folder on the rank that holds it (which
    then finishes the run), None on the others."""
    ctx = init(None, plan.device, plan.case_timeout_s)
    run_dir = start_run(plan, out, tag, argv, "torchrun") if ctx.rank == 0 else None
    plan, run_dir = join_job(ctx, run_dir=run_dir, out=out, home_capable=ctx.rank == 0)
    try:
        execute(ctx, plan, run_dir)
    except PreflightError as exc:
        ctx.log(f"gpuprof: preflight failed: {exc}")
        sys.exit(1)
    dist.barrier()
    dist.destroy_process_group()
    return run_dir if ctx.rank == ctx.home_rank else None


if __name__ == "__main__":
    worker_main()
