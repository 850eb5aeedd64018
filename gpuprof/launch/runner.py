"""A sweep from start to end on this node, for `gpuprof sweep`, `gpuprof run <probe>` and the
`torchrun -m gpuprof.probes.<probe>` mains.

The plan comes from the options (or the run being resumed). This process launches and watches
the node's ranks (local, manual, slurm), or is one rank torchrun started ("torchrun"). Node 0
(or rank 0) consolidates, sets the status and writes the report.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuprof import registry
from gpuprof.errors import UsageError
from gpuprof.launch.launchers import check_launch, dry_run_commands, node_command, resolve_launcher
from gpuprof.launch.progress import Progress, wanted
from gpuprof.launch.supervise import SignalGuard, Supervised, supervise
from gpuprof.launch.torchrun import LaunchConfig
from gpuprof.machine.env import CASE_LINES_ENV, cpu_build_note, link_gbps, this_host, torchrun_sizes
from gpuprof.machine.node import nvml_gpu_count, plan_device
from gpuprof.reports.prometheus import check_textfile_path, write_textfile
from gpuprof.runs.finish import finish_run
from gpuprof.runs.plan import SweepPlan, build_plan, estimated_seconds, estimates
from gpuprof.runs.store import (
    RUN_JSON,
    Run,
    check_out_dir,
    check_tag,
    completed_cases,
    open_run,
    prepare_resume,
    resume_plan,
    start_run,
    update_run_json,
)

CPU_RANKS_PER_CORE = 4  # gloo ranks beyond this only measure the OS scheduler
OVERRUN_FACTOR = 1.5  # a sweep this many times its estimate says so


@dataclass(frozen=True, kw_only=True)
class SweepRequest:
    """What the user asked for, as the command line gave it."""

    probes: tuple[str, ...]
    opts: Mapping[str, Any] = field(default_factory=dict)  # probe options; None = not given
    out: Path = Path("reports")
    tag: str = "sweep"
    argv: list[str] = field(default_factory=list)
    nodes: int = 1
    gpus: int | None = None  # default: the visible GPUs, or 2 ranks on CPU
    suite: str = "quick"
    device: str = "auto"
    timeout: float = 300.0
    telemetry_hz: float = 10.0
    launcher: str = "auto"
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    resume: str | None = None
    report: bool = True
    force: bool = False  # more CPU ranks per node than CPU_RANKS_PER_CORE per core
    link_gbps: float | None = None  # the estimate's network rate (default: the NIC's)
    prom_textfile: str | None = None  # where to write the run's Prometheus textfile at the end
    quiet: bool = False  # no live progress line and no per-case lines


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """Where a sweep wrote its run, and how it ended (`home`: this node holds the run)."""

    run_dir: Path | None
    status: str
    failures: list[dict[str, Any]]
    report: Path | None
    verdict: str | None = None  # the report's verdict line
    findings: tuple[str, ...] = ()  # the report's findings
    home: bool = True
    note: str | None = None  # said instead of measuring (a resumed run that is complete)
    overrun: str | None = None  # the sweep took much longer than estimated
    took_s: float | None = None  # launch to report, on the home node
    estimated_s: float | None = None  # what the dry run estimated for the same plan
    silent: bool = False  # a rank torchrun started that does not hold the run: nothing to say


def plan_for(request: SweepRequest, kind: str, preview: bool = False) -> SweepPlan:
    """The plan of a new run: job shape from torchrun's environment or the options
    (`preview`: a dry run, which may plan CUDA ranks on a machine without GPUs)."""

    nodes, gpus = request.nodes, request.gpus
    if kind == "torchrun":  # started by torchrun on every rank: its sizes are the job's
        world, local = torchrun_sizes()
        nodes, gpus = max(1, world // local), local
    if gpus is not None and gpus < 1:
        raise UsageError(f"--gpus must be at least 1, got {gpus}", "give the ranks per node")
    if preview and request.device == "cuda" and gpus is None and not _cuda_visible():
        try:
            plan_device(request.device)  # why this machine has none (a CPU build of torch...)
        except UsageError as exc:
            raise UsageError(exc.message, "to preview a GPU node's commands, give --gpus") from None
        raise UsageError("a dry run of CUDA ranks on a machine without GPUs needs --gpus")
    if preview and request.device == "cuda" and not _cuda_visible():  # a login node
        device, visible = "cuda", gpus or 0
    else:
        device, visible = plan_device(request.device)
    if device == "cpu" and request.device == "auto":
        _note_unused_gpus()
    if gpus is None:
        gpus = visible if device == "cuda" else 2
    cores = os.cpu_count() or 1
    if device == "cpu" and gpus > CPU_RANKS_PER_CORE * cores and not request.force:
        raise UsageError(
            f"--gpus {gpus} CPU ranks on a node with {cores} core(s)",
            f"use at most {CPU_RANKS_PER_CORE * cores}, or pass --force",
        )
    if device == "cuda" and gpus > visible and kind != "torchrun" and not preview:
        raise UsageError(
            f"--gpus {gpus} but only {visible} GPU(s) are visible", f"use --gpus {visible} or fewer"
        )
    plan = build_plan(
        request.probes,
        request.opts,
        nodes=nodes,
        gpus=gpus,
        suite=request.suite,
        device=device,
        timeout=request.timeout,
        telemetry_hz=request.telemetry_hz,
        link_gbps=_link_gbps(request, nodes),
    )
    if kind != "torchrun" and not any(e.cases for e in estimates(plan)):
        probes = ", ".join(plan.probes)
        raise UsageError(
            f"the plan measures nothing: {probes} ha{'s' if len(plan.probes) == 1 else 've'} "
            f"no case on {nodes} node(s) x {gpus} rank(s) with these options",
            "check the options against the job's shape (e.g. --scopes inter needs 2+ nodes)",
        )
    return plan


def _cuda_visible() -> bool:
    import torch  # heavy: only when a sweep resolves its device

    return bool(torch.cuda.is_available() and torch.cuda.device_count())


def _note_unused_gpus() -> None:
    """Say so when NVML sees GPUs that torch cannot use (a CPU build of torch)."""
    import torch  # heavy: only when a CPU sweep may leave GPUs unused

    seen = nvml_gpu_count() if torch.version.cuda is None else 0
    if seen:
        sys.stderr.write(f"gpuprof: note: {cpu_build_note(seen)}; measuring CPU + gloo\n")


def _link_gbps(request: SweepRequest, nodes: int) -> float | None:
    """The network rate the estimate assumes: --link-gbps, else (on more than one node) the
    line rate of the interface the ranks talk over."""
    if request.link_gbps is not None or nodes == 1:
        return request.link_gbps
    return link_gbps()


def _config(request: SweepRequest, kind: str) -> LaunchConfig:
    return LaunchConfig(
        launcher=kind,
        node_rank=request.node_rank,
        master_addr=request.master_addr,
        master_port=request.master_port,
    )


def dry_run(request: SweepRequest) -> list[str]:
    """The commands the sweep would run, one per node; nothing is written."""
    check_tag(request.tag)
    kind = resolve_launcher(request.launcher)
    if kind == "torchrun":
        raise UsageError("--dry-run under torchrun: this process is already a rank")
    if request.resume is not None:
        return resume_preview(request, kind)
    plan = plan_for(request, kind, preview=True)
    check_out_dir(request.out)
    lines = estimate_lines(plan)
    if plan.num_nodes > 1 and request.launcher == "auto" and kind == "local":
        # outside an allocation, before sbatch: what each multi-node launcher would run
        lines.append("# not in a Slurm allocation or torchrun: the commands each launcher runs")
        if plan.device == "cpu" and request.device == "auto":
            lines.append("# device cpu: this machine sees no GPU (--device cuda for a GPU cluster)")
        for other in ("slurm", "manual"):
            lines += preview_commands(plan, _config(request, other), request.out)
        return lines
    if kind in ("slurm", "manual") and not ready_to_launch(_config(request, kind)):
        return [*lines, *preview_commands(plan, _config(request, kind), request.out)]
    commands = dry_run_commands(plan, check_launch(plan, _config(request, kind)), request.out)
    return [*lines, *commands]


def resume_preview(request: SweepRequest, kind: str) -> list[str]:
    """What `--resume` would still measure: per probe the cases every rank recorded against
    the plan's, the estimate of what is left, and the command."""
    run = open_run(str(request.resume), request.out)
    if run.status == "complete":
        return [f"# {run.path} is complete; nothing to resume"]
    plan = resume_plan(run.path)
    done: dict[str, set[tuple[Any, ...]]] = {}
    for probe, scope, world, _group, case_id in completed_cases(run.path):
        done.setdefault(str(probe), set()).add((scope, world, case_id))
    lines, left = [f"# resume {run.path} ({run.status})"], float(registry.JOB_OVERHEAD_S)
    for e in estimates(plan):
        measured = min(len(done.get(e.probe, ())), e.cases)
        share = (e.cases - measured) / e.cases if e.cases else 0.0
        left += e.seconds * share
        lines.append(
            f"# {e.probe}: {measured} of {e.cases} cases measured, {e.cases - measured} left, "
            f"about {e.seconds * share:.0f} s"
        )
    lines.append(f"# in all about {left:.0f} s left")
    cfg = _config(request, kind)
    if kind in ("slurm", "manual") and not ready_to_launch(cfg):
        return [*lines, *preview_commands(plan, cfg, request.out)]
    return [*lines, *dry_run_commands(plan, check_launch(plan, cfg), request.out)]


def ready_to_launch(cfg: LaunchConfig) -> bool:
    """Whether a real launch could be checked here: Slurm inside an allocation, manual with
    node 0's address."""
    if cfg.launcher == "slurm":
        return "SLURM_JOB_ID" in os.environ
    return cfg.launcher != "manual" or bool(cfg.master_addr)


def preview_commands(plan: SweepPlan, cfg: LaunchConfig, out: Path) -> list[str]:
    """A launcher's commands without its environment (no allocation, no address yet):
    placeholders where the launch would fill them in, said in a comment."""
    if cfg.launcher == "slurm":
        head = (
            "# slurm, from the batch script (sbatch --nodes "
            f"{plan.num_nodes} --gpus-per-node {plan.gpus_per_node} --ntasks-per-node 1): "
            "JOBID and the host are the allocation's"
        )
    else:
        cfg = replace(cfg, master_addr=cfg.master_addr or "NODE0_ADDRESS")
        head = "# manual, on each node (NODE0_ADDRESS: node 0's address, reachable from all)"
    return [head, *dry_run_commands(plan, cfg, out)]


def estimate_lines(plan: SweepPlan) -> list[str]:
    """What the plan runs and about how long, as comment lines."""
    lines = [line for e in estimates(plan) for line in e.lines()]
    if plan.num_nodes == 1:
        network = ""
    elif plan.link_gbps:
        network = f", + the bytes each case's iterations send over a {plan.link_gbps:g} Gbit/s link"
    else:
        network = "; the network's time is not included (its rate is unknown: --link-gbps)"
    lines.append(
        f"# in all about {estimated_seconds(plan):.0f} s on {plan.num_nodes} x "
        f"{plan.gpus_per_node} ranks (time budgets + per-case overheads measured on CPU ranks, "
        f"+ launch and report{network})"
    )
    return lines


def sweep(request: SweepRequest) -> SweepResult:
    """Measure: create (or resume) the run, launch or join the ranks, and finish the run."""
    check_tag(request.tag)
    if request.prom_textfile:
        check_textfile_path(Path(request.prom_textfile))
    kind = resolve_launcher(request.launcher)
    resume_dir = None
    if request.resume is not None:
        run = open_run(request.resume, request.out)
        if run.status == "complete":
            note = f"{run.path} is complete; nothing to resume"
            return SweepResult(
                run_dir=run.path, status="complete", failures=[], report=None, note=note
            )
        resume_dir, plan = run.path, resume_plan(run.path)
    else:
        plan = plan_for(request, kind)
    check_out_dir(request.out)
    if kind == "torchrun":
        return _inline(plan, request)
    cfg = check_launch(plan, _config(request, kind))
    if cfg.launcher == "manual" and cfg.node_rank != 0:
        return _helper_node(plan, cfg, request.out)
    return _home_node(plan, cfg, request, resume_dir)


def _home_node(
    plan: SweepPlan, cfg: LaunchConfig, request: SweepRequest, resume: Path | None
) -> SweepResult:
    """Create the run (or resume one), launch this node's ranks once, supervise, finish."""
    if resume is not None:
        run_dir = prepare_resume(resume, request.argv)
    else:
        run_dir = start_run(plan, request.out, request.tag, request.argv, cfg.launcher)
    launch = node_command(plan, cfg, run_dir=run_dir, out=request.out)
    home_rank = None if cfg.launcher == "slurm" else 0  # under Slurm c10d assigns node ranks
    guard = SignalGuard()
    started = time.monotonic()
    live = wanted(request.quiet)
    env = {CASE_LINES_ENV: "0"} if live or request.quiet else {}
    try:
        bar = Progress([(e.probe, e.cases) for e in estimates(plan)]) if live else None
        supervised = supervise(
            launch,
            run_dir,
            plan.case_timeout_s,
            node_rank=home_rank,
            guard=guard,
            progress=bar,
            env=env,
        )
        result = _finish(run_dir, request, supervised)
    finally:
        guard.restore()
    return _timed(result, plan, time.monotonic() - started)


def _finish(run_dir: Path, request: SweepRequest, supervised: Supervised | None) -> SweepResult:
    """Finish the run (tables, status), then write what the request asked for: the report (the
    tables handed over as built) and the Prometheus textfile."""
    kept: dict[str, Any] | None = {} if request.report else None
    info = finish_run(run_dir, supervised.returncode if supervised else 0, supervised, kept)
    report: Path | None = None
    verdict: str | None = None
    found: list[str] = []
    if request.report:
        # deferred: loads plotly, for the report only
        from gpuprof.reports.html import write_report_headline

        report, verdict, found = write_report_headline(Run(run_dir, kept))
    if request.prom_textfile:
        write_textfile(run_dir, Path(request.prom_textfile))
    return SweepResult(
        run_dir=run_dir,
        status=info["status"],
        failures=info["failures"],
        report=report,
        verdict=verdict,
        findings=tuple(found),
    )


def _timed(result: SweepResult, plan: SweepPlan, took_s: float) -> SweepResult:
    """The result with how long the sweep took against its estimate (in run.json too), and a
    line when it took much longer (say so: the user planned on it)."""
    estimate = estimated_seconds(plan)
    if result.run_dir is not None and (result.run_dir / RUN_JSON).is_file():
        update_run_json(result.run_dir, took_s=round(took_s, 1), estimated_s=round(estimate, 1))
    overrun = (
        f"the sweep took {took_s:.0f} s, {took_s / estimate:.1f}x the estimated {estimate:.0f} s "
        "(cases outlasting their budget: a slow link or large sizes; see --dry-run)"
        if took_s > OVERRUN_FACTOR * estimate
        else None
    )
    return replace(result, overrun=overrun, took_s=took_s, estimated_s=estimate)


def _helper_node(plan: SweepPlan, cfg: LaunchConfig, out: Path) -> SweepResult:
    """A node other than node 0: measure, keep a local copy of this node's shards."""
    out.mkdir(parents=True, exist_ok=True)
    guard = SignalGuard()
    with tempfile.TemporaryDirectory(prefix="gpuprof-") as tmp:
        handoff = Path(tmp) / "run_dir"
        launch = node_command(plan, cfg, run_dir=None, out=out, handoff=handoff)
        try:
            supervised = supervise(launch, None, plan.case_timeout_s, handoff=handoff, guard=guard)
        finally:
            guard.restore()
    status = "complete" if supervised.returncode == 0 else "failed"
    failures = []
    if status != "complete":
        error = supervised.reason or f"torchrun exited with {supervised.returncode}"
        failures.append(
            {"rank": None, "host": this_host(), "probe": None, "case_id": None, "error": error}
        )
    return SweepResult(
        run_dir=supervised.run_dir, status=status, failures=failures, report=None, home=False
    )


def _inline(plan: SweepPlan, request: SweepRequest) -> SweepResult:
    """This process is one rank of a job torchrun started: measure; rank 0 finishes."""
    from gpuprof.probes.sweep import run_inline  # torch: loaded only when this process is a rank

    run_dir = run_inline(plan, request.out, request.tag, request.argv)
    if run_dir is None:  # not the rank that holds the run
        return SweepResult(
            run_dir=None, status="complete", failures=[], report=None, home=False, silent=True
        )
    return _finish(run_dir, request, None)
