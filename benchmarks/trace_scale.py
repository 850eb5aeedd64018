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


def _write_repeated(path: Path, doc: dict, copies: int, rank: int, world: int) -> int:
    """Write the trace with its events repeated `copies` times, each copy shifted past the
    last, a copy at a time; returns the bytes written."""
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    meta["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": world}
    with path.open("w") as out:
        out.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in meta.items()))
        out.write(',\n"traceEvents": [\n')
        for k in range(copies):
            lines = []
            for event in events:
                e = dict(event)
                if isinstance(e.get("ts"), int | float):
                    e["ts"] = e["ts"] + k * span
                name = str(e.get("name", ""))
                if name.startswith("ProfilerStep#"):
                    e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + 2 * k}"
                args = e.get("args")
                if isinstance(args, dict) and "correlation" in args:
                    e["args"] = {**args, "correlation": args["correlation"] + k * 10_000_000}
                lines.append(json.dumps(e))
            out.write((",\n" if k else "") + ",\n".join(lines))
        out.write("\n]\n}\n")
        return out.tell()


def make_job(folder: Path, ranks: int, total_gb: float) -> int:
    """Write the job; returns its size in bytes."""
    sources = [
        json.loads(gzip.decompress(p.read_bytes())) for p in sorted(SOURCE.glob("*.json.gz"))
    ]
    one = _write_repeated(folder / "probe.json", sources[0], 1, 0, ranks)
    (folder / "probe.json").unlink()
    copies = max(1, round(total_gb * 1e9 / ranks / one))
    return sum(
        _write_repeated(
            folder / f"rank{rank}.pt.trace.json", sources[rank % len(sources)], copies, rank, ranks
        )
        for rank in range(ranks)
    )


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
        result = _read(tmp, args.jobs)
        baseline = _read(SOURCE, 1)  # the interpreter, pandas and numpy: 2 small traces
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
        f"peak memory: reading process {result['parent_mb']:.0f} MB, largest worker "
        f"{result['worker_mb']:.0f} MB, against {baseline['parent_mb']:.0f} MB reading two "
        f"small traces; largest trace file {biggest / 1e6:.0f} MB"
    )
    if not result["worker_mb"]:  # read in one process: what a kept event costs
        above = (result["parent_mb"] - baseline["parent_mb"]) * 2**20
        print(f"above that baseline: {above / result['events']:.0f} bytes a kept event")


def _read(folder: Path, jobs: int | None) -> dict[str, float]:
    """Read a folder's traces in a fresh process; its time, events and peak memory."""
    code = (
        "import json, resource, sys, time\n"
        "from pathlib import Path\n"
        "from gpuprof.traces.job import read_job\n"
        "t = time.perf_counter()\n"
        f"tables = read_job(Path({str(folder)!r}), {jobs!r})\n"
        "dt = time.perf_counter() - t\n"
        # VmHWM: this process's own peak (ru_maxrss would keep the parent's across exec)
        "self_kb = int(next(l.split()[1] for l in open('/proc/self/status')\n"
        "              if l.startswith('VmHWM')))\n"
        "kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'seconds': dt, 'events': tables.info['events'],\n"
        "  'collectives': len(tables.collectives), 'parent_mb': self_kb / 1024,\n"
        "  'worker_mb': kids_kb / 1024}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
