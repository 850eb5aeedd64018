"""The data path at scale: a run of --ranks ranks (8 a node) written with the real shard
writer, then timed on it: the sweep's end (consolidate, then the report from the tables just
built, in one process as a sweep does it), `report` alone (the tables read back), `show`,
`predict`, `baseline` and `check` (in the order they follow a sweep: the report saves the
summaries the others read); and the report's size.

The records are a real quick sweep's (2 CPU ranks here, or --run), laid out as the same plan
runs on the large job: the collectives in every scope group of 128 x 8 ranks (intra at 2, 4
and 8 ranks on every node, inter, rails, global), p2p in the rounds of pairs it measures
there (pairs in a node, then node-pair rounds), memory and compute on every rank each way
they ran, DDP over all ranks, the pipeline as the template ran it; each rank's record is the
template rank's with its labels (rank, node, host, group, world size). Telemetry: every node
sampled at --hz for --seconds (default: the dry run's estimate of the quick suite on that
job), with the host, a NIC per GPU plus one, and 8 GPUs, the rows the sampler writes.

    python benchmarks/run_scale.py --ranks 1024 [--run RUN] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from gpuprof.machine.groups import device_rounds, scope_groups
from gpuprof.runs.plan import SweepPlan, build_plan, estimated_seconds
from gpuprof.runs.records import ShardWriter, read_jsonl, shard_path
from gpuprof.runs.store import read_json, write_json_atomic
from gpuprof.specs.p2p import pair_rounds
from gpuprof.specs.pipeline import stage_ranks

GPUS = 8
WHERE = ("rank", "node_rank", "host", "scope", "group", "world_size", "num_nodes", "group_rank")


def host(node: int) -> str:
    return f"node{node:04d}"


def templates(run_dir: Path) -> dict[tuple[str, str], dict[int, list[dict[str, Any]]]]:
    """(probe, scope) -> group rank -> the template's records (case and timeline lines)."""
    out: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for path in sorted((run_dir / "ranks").glob("rank-*.jsonl")):
        for rec in read_jsonl(path):
            if rec.get("type") in ("case", "timeline"):
                out[(rec["probe"], rec["scope"])][rec["group_rank"]].append(rec)
    return out


def placed(
    rec: dict[str, Any], rank: int, scope: str, group: str, world: int, nodes: int, group_rank: int
) -> dict[str, Any]:
    """The template record as rank `rank` of `group` writes it."""
    node = rank // GPUS
    where = (rank, node, host(node), scope, group, world, nodes, group_rank)
    return {**rec, **dict(zip(WHERE, where, strict=True))}


def layout(
    plan: SweepPlan, tpl: dict[tuple[str, str], dict[int, list[dict[str, Any]]]]
) -> dict[int, list[dict[str, Any]]]:
    """rank -> its records on the large job."""
    n = plan.num_nodes
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)

    def put(probe: str, tscope: str, scope: str, group: str, members: tuple[int, ...], nodes: int):  # type: ignore[no-untyped-def]
        by_rank = tpl.get((probe, tscope)) or {}
        for i, rank in enumerate(members):
            for rec in by_rank.get(i % max(1, len(by_rank)), []):
                out[rank].append(placed(rec, rank, scope, group, len(members), nodes, i))

    coll = plan.params["collectives"]
    for spec in scope_groups(n, GPUS, coll.scopes):  # type: ignore[attr-defined]
        for name, members in zip(spec.names, spec.members, strict=True):
            put("collectives", "global", spec.scope, name, members, spec.num_nodes)
    p2p = plan.params["p2p"]
    by_mode = tpl.get(("p2p", "pairs")) or {}
    for index, pairs in enumerate(pair_rounds(n, GPUS, p2p.node_rounds)):  # type: ignore[attr-defined]
        members = tuple(sorted(r for pair in pairs for r in pair))
        nodes = len({r // GPUS for r in members})
        for a, b in pairs:
            for end, (me, peer) in enumerate(((a, b), (b, a))):
                for rec in by_mode.get(end, []):
                    rec = {
                        **rec,
                        "params": {**rec["params"], "rank_a": a, "rank_b": b, "peer": peer},
                    }
                    out[me].append(
                        placed(rec, me, "pairs", f"round{index}", len(members), nodes,
                               members.index(me))
                    )  # fmt: skip
    for probe in ("memory", "compute"):
        for tscope, way in (("device", "alone"), ("node", "together")):
            if (probe, tscope) not in tpl:
                continue
            for spec in device_rounds(n, GPUS, way):
                for name, (rank,) in zip(spec.names, spec.members, strict=True):
                    for rec in tpl[(probe, tscope)][0]:
                        out[rank].append(placed(rec, rank, tscope, name, 1, 1, 0))
    put("ddp", "global", "global", "all", tuple(range(n * GPUS)), n)
    put("ddp", "single", "single", "rank0", (0,), 1)
    pipe = stage_ranks(n, GPUS, 2)  # the template's 2 stages, across the job
    put("pipeline", "global", "stages", "pipe", pipe, len({r // GPUS for r in pipe}))
    return out


def telemetry(run_dir: Path, nodes: int, start_ns: int, seconds: float, hz: float) -> int:
    """Every node's samples as the sampler writes them; the number of rows."""
    folder = run_dir / "telemetry"
    folder.mkdir(exist_ok=True)
    instants = max(1, int(seconds * hz))
    rng = np.random.default_rng(0)
    rows = 0
    for node in range(nodes):
        lines = []
        for k in range(instants):
            t = start_ns + int(k * 1e9 / hz)
            base = {"t_ns": t, "host": host(node), "node_rank": node}
            lines.append({**base, "source": "host", "cpu_pct": float(rng.uniform(0, 100)),
                          "cpu_max_pct": 100.0, "cpu_busy_cores": 9, "mem_used_bytes": 2 << 40,
                          "mem_pct": 20.0})  # fmt: skip
            for nic in [f"ib{i}" for i in range(GPUS)] + ["eth0"]:
                lines.append({**base, "source": f"nic:{nic}", "tx_bytes": k << 30,
                              "rx_bytes": k << 30, "tx_gbps": 40.0, "rx_gbps": 40.0})  # fmt: skip
            for g in range(GPUS):
                lines.append({**base, "source": f"gpu{g}", "gpu_util_pct": 90.0, "power_w": 600.0,
                              "sm_clock_mhz": 1980.0, "mem_used_bytes": 60 << 30,
                              "temp_c": 60.0, "throttled": False})  # fmt: skip
        rows += len(lines)
        with (folder / f"node-{node}.jsonl").open("w") as handle:
            handle.writelines(json.dumps(line) + "\n" for line in lines)
    return rows


def write_run(src: Path, run_dir: Path, ranks: int, hz: float, seconds: float | None) -> str:
    """The large run written from the records of `src`: what it holds, as a line."""
    nodes = ranks // GPUS
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "ranks").mkdir(parents=True)
    small = SweepPlan.from_dict(read_json(src / "plan.json"))
    plan = replace(small, num_nodes=nodes, gpus_per_node=GPUS)
    write_json_atomic(run_dir / "plan.json", plan.to_dict())
    info = read_json(src / "run.json")
    node0, rank0 = info["nodes"][0], info["ranks"][0]
    info.update(
        num_nodes=nodes, gpus_per_node=GPUS, world_size=ranks, status="running",
        nodes=[{**node0, "node_rank": k, "host": host(k)} for k in range(nodes)],
        ranks=[{**rank0, "rank": r, "local_rank": r % GPUS, "node_rank": r // GPUS,
                "host": host(r // GPUS)} for r in range(ranks)],
    )  # fmt: skip
    for stale in ("tables", "took_s", "estimated_s", "finished_utc"):
        info.pop(stale, None)
    write_json_atomic(run_dir / "run.json", info)
    start = time.perf_counter()
    records = layout(plan, templates(src))
    count = 0
    for rank in range(ranks):
        writer = ShardWriter(shard_path(run_dir, rank))
        for rec in records.get(rank, []):
            writer.write(rec)
        writer.sync()
        count += len(records.get(rank, []))
    wrote_s = time.perf_counter() - start
    iterations = sum(len(r.get("times_us", [])) for rs in records.values() for r in rs)
    del records
    cuda_quick = build_plan((), {}, nodes=nodes, gpus=GPUS, suite="quick", device="cuda")
    seconds = seconds or estimated_seconds(cuda_quick)
    first = min(
        r["start_unix_ns"] for r in read_jsonl(shard_path(run_dir, 0)) if "start_unix_ns" in r
    )
    samples = telemetry(run_dir, nodes, first, seconds, hz)
    shard_mb = sum(p.stat().st_size for p in (run_dir / "ranks").iterdir()) / 1e6
    tel_mb = sum(p.stat().st_size for p in (run_dir / "telemetry").iterdir()) / 1e6
    return (f"{ranks} ranks ({nodes} nodes x {GPUS}): {count:,} case records, "
            f"{iterations:,} iterations ({shard_mb:,.0f} MB of shards, written in "
            f"{wrote_s:.1f} s); telemetry {samples:,} samples ({tel_mb:,.0f} MB: "
            f"{seconds:.0f} s at {hz:g} Hz)")  # fmt: skip


def timed(label: str, argv: list[str], results: dict[str, float]) -> str:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    results[label] = time.perf_counter() - start
    print(f"  {label}: {results[label]:.1f} s", flush=True)
    if done.returncode not in (0, 1):  # check exits 1 on a regression; anything else is wrong
        raise SystemExit(f"{label} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def in_chromium(report: Path) -> str:
    """The report in headless Chromium: the console messages it logged and the figures it
    drew (plotly draws 3 svg layers per figure), or why it was not opened."""
    chromium = next(
        (shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None
    )
    if chromium is None:
        return "not opened (no chromium)"
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--virtual-time-budget=20000", "--dump-dom", report.as_uri()],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    figures = done.stdout.count('class="plotly-graph-div')
    drawn = done.stdout.count('class="main-svg') // 3
    return f"Chromium: {len(console)} console message(s), {drawn} of {figures} figures drawn"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024, help="ranks of the job (8 a node)")
    parser.add_argument(
        "--run", type=Path, help="a run to take records from (default: a fresh quick sweep)"
    )
    parser.add_argument("--hz", type=float, default=10.0, help="telemetry samples a second")
    parser.add_argument("--seconds", type=float, help="telemetry span (default: the estimate)")
    parser.add_argument("--keep", type=Path, help="keep the large run here")
    parser.add_argument("--no-gate", action="store_true", help="leave out baseline and check")
    args = parser.parse_args()
    if args.ranks % GPUS:
        raise SystemExit(f"--ranks must be a multiple of {GPUS}")
    py = [sys.executable, "-m", "gpuprof"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if args.run is None:
            sweep = [*py, "sweep", "--gpus", "2", "--device", "cpu", "--no-report"]
            subprocess.run([*sweep, "--out", str(out / "src")], check=True, capture_output=True)
            args.run = next((out / "src").iterdir())
        run_dir = (args.keep or out / "big") / "0001_scale"
        # written by another process, which then exits: the gigabytes of a large job's records
        # (which Python keeps after they are dropped) are not held here while the commands
        # that follow are timed, as a sweep's launcher holds none of them
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
            made = pool.submit(write_run, Path(args.run), run_dir, args.ranks, args.hz,
                               args.seconds)  # fmt: skip
            print(made.result(), flush=True)
        # a real sweep writes its shards over its whole run (minutes at 1,024 ranks: the
        # kernel has flushed them by its end); written here in seconds, they would still be
        # flushing to disk while the end is timed, on the same cores
        os.sync()
        results: dict[str, float] = {}
        end = ("import sys; from pathlib import Path; from gpuprof.launch.runner import "
               "SweepRequest, _finish; "
               "_finish(Path(sys.argv[1]), SweepRequest(probes=()), None)")  # fmt: skip
        # as a sweep ends: the shards consolidated, the report written from the tables built
        timed("consolidate + report (a sweep's end)", [sys.executable, "-c", end, str(run_dir)],
              results)  # fmt: skip
        shutil.rmtree(run_dir / "summaries")
        timed("report (alone, the tables read back)", [*py, "report", str(run_dir)], results)
        # as a user's commands follow a sweep (which wrote the report): they read the
        # summaries the report saved
        timed("show", [*py, "show", str(run_dir), "--table", "collectives"], results)
        timed("predict", [*py, "predict", str(run_dir), "--nodes", "128,1024"], results)
        if not args.no_gate:
            base = run_dir.parent / "base.json"
            timed("baseline", [*py, "baseline", str(run_dir), "-o", str(base)], results)
            timed("check", [*py, "check", "--baseline", str(base), "--run", str(run_dir)], results)
        tables_mb = sum(p.stat().st_size for p in run_dir.glob("*.parquet")) / 1e6
        report_mb = (run_dir / "report.html").stat().st_size / 1e6
        print(f"  {in_chromium(run_dir / 'report.html')}")
        print(f"  tables {tables_mb:.0f} MB; report.html {report_mb:.1f} MB")
        print(json.dumps({"ranks": args.ranks, **{k: round(v, 2) for k, v in results.items()},
                          "report_mb": round(report_mb, 2)}))  # fmt: skip


if __name__ == "__main__":
    main()
