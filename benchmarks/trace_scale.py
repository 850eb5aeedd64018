"""How `gpuprof trace` scales: a synthetic job of --ranks rank traces and about --total-gb
of JSON, made by repeating a real GPU trace (HolisticTraceAnalysis's sample, two ranks of an
A100 job; tests/data/hta_trace_filter) step after step with shifted times, step numbers and
correlation ids. Prints the read time, the throughput, and the peak memory of the reading
processes against the size of one file (targets: 64 ranks x 1 GB in under a minute; memory
bounded: a reader holds compact arrays, never the file).

    python benchmarks/trace_scale.py [--ranks 64] [--total-gb 1.0] [--jobs N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "tests" / "data" / "hta_trace_filter"


def _repeat(doc: dict, copies: int, rank: int, world: int) -> str:
    """The trace with its events repeated `copies` times, each copy shifted past the last."""
    events = doc["traceEvents"]
    timed = [e for e in events if "ts" in e and isinstance(e.get("ts"), int | float)]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    meta["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": world}
    parts = ["{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in meta.items())]
    parts.append(',\n"traceEvents": [\n')
    out = []
    for k in range(copies):
        for event in events:
            e = dict(event)
            if "ts" in e and isinstance(e["ts"], int | float):
                e["ts"] = e["ts"] + k * span
            name = str(e.get("name", ""))
            if name.startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + 2 * k}"
            args = e.get("args")
            if isinstance(args, dict) and "correlation" in args:
                e["args"] = {**args, "correlation": args["correlation"] + k * 10_000_000}
            out.append(json.dumps(e))
    parts.append(",\n".join(out))
    parts.append("\n]\n}\n")
    return "".join(parts)


def make_job(folder: Path, ranks: int, total_gb: float) -> int:
    """Write the job; returns its size in bytes."""
    sources = [
        json.loads(gzip.decompress(p.read_bytes())) for p in sorted(SOURCE.glob("*.json.gz"))
    ]
    one = len(_repeat(sources[0], 1, 0, ranks))
    copies = max(1, round(total_gb * 1e9 / ranks / one))
    total = 0
    for rank in range(ranks):
        text = _repeat(sources[rank % len(sources)], copies, rank, ranks)
        path = folder / f"rank{rank}.pt.trace.json"
        path.write_text(text)
        total += len(text)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--total-gb", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--keep", type=Path, help="make the job in this folder and keep it")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trace_scale_")) if args.keep is None else args.keep
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        size = make_job(tmp, args.ranks, args.total_gb)
        made = time.perf_counter() - started
        print(f"made {args.ranks} traces, {size / 1e9:.2f} GB in {made:.0f} s")
        biggest = max(p.stat().st_size for p in tmp.iterdir())
        # the read runs in its own process, so its peak memory (and its workers') is its own
        code = (
            "import json, resource, sys, time\n"
            "from pathlib import Path\n"
            "from gpuprof.traces.job import read_job\n"
            "t = time.perf_counter()\n"
            f"tables = read_job(Path({str(tmp)!r}), {args.jobs!r})\n"
            "dt = time.perf_counter() - t\n"
            "self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
            "print(json.dumps({'seconds': dt, 'events': tables.info['events'],\n"
            "  'collectives': len(tables.collectives), 'parent_mb': self_kb / 1024,\n"
            "  'worker_mb': kids_kb / 1024}))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    seconds = result["seconds"]
    print(
        f"read {args.ranks} ranks, {size / 1e9:.2f} GB, {result['events']:,} events, "
        f"{result['collectives']:,} collectives matched: {seconds:.1f} s "
        f"({size / 1e6 / seconds:.0f} MB/s; target under 60 s)"
    )
    print(
        f"peak memory: reader process {result['parent_mb']:.0f} MB, largest worker "
        f"{result['worker_mb']:.0f} MB; largest trace file {biggest / 1e6:.0f} MB "
        f"(ratio worker / file {result['worker_mb'] * 2**20 / biggest:.2f})"
    )


if __name__ == "__main__":
    main()
