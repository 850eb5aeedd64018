"""A sweep on an emulated cluster (network namespaces, shaped links), timed against its estimate.

    python benchmarks/emulated_sweep.py --nodes 2 --gpus 2 --rate 200mbit --out /tmp/emu \
        [-- SWEEP OPTIONS...]

Builds the cluster with scripts/netns-cluster.sh (root, iproute2), runs `gpuprof sweep
--launcher manual` on every node (the quick suite on CPU unless the options after `--` say
otherwise), always tears the cluster down, then prints the wall time, the sweep's own estimate
(`--dry-run`, which knows the link rate given here), and each probe's time from the run's phase
markers. Node 0's run is under --out/n0. Used for the quick suite's time goal and to measure the
held-out shapes that `gpuprof predict` is checked against.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster import emulated_cluster, manual_sweep_argv, unavailable


def sweep_argv(args: argparse.Namespace, node: int, master: str, extra: list[str]) -> list[str]:
    out = Path(args.out) / f"n{node}"
    return manual_sweep_argv(args.nodes, args.gpus, node, master, args.port, out, extra)


def probe_seconds(run_dir: Path) -> dict[str, float]:
    """Each probe's span on node 0: first case start to last case end, from the run table."""
    from gpuprof import registry
    from gpuprof.runs.store import open_run

    run = open_run("latest", run_dir)
    spans: dict[str, float] = {}
    for name in registry.names():
        if name not in run.tables():
            continue
        frame = run.table(name)
        if frame.empty or "start_unix_ns" not in frame:
            continue
        spans[name] = (frame["end_unix_ns"].max() - frame["start_unix_ns"].min()) / 1e9
    return spans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--rate", default="200mbit", help="every node's link, tc tbf syntax")
    parser.add_argument("--port", type=int, default=29561)
    parser.add_argument("--out", required=True)
    parser.add_argument("extra", nargs="*", help="sweep options (after --)")
    args = parser.parse_args()
    why = unavailable()
    if why:
        print(f"cannot emulate a cluster here: {why}", file=sys.stderr)
        return 2
    mbit = float(args.rate.lower().removesuffix("mbit"))
    # the veth's line rate is not the shaped link's: tell the estimate
    extra = [*(args.extra or ["--suite", "quick"]), "--link-gbps", str(mbit / 1e3)]
    dry = subprocess.run(
        [*sweep_argv(args, 0, "127.0.0.1", extra), "--dry-run"],
        capture_output=True,
        text=True,
        check=False,
    )
    print(dry.stdout.strip() or dry.stderr.strip())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with emulated_cluster(args.nodes, args.rate) as cluster:
        start = time.monotonic()
        procs = [
            cluster.popen(node, sweep_argv(args, node, cluster.addr(0), extra), out / f"{node}.log")
            for node in range(args.nodes)
        ]
        codes = [p.wait(timeout=3600) for p in procs]
        wall = time.monotonic() - start
    print(f"exit codes {codes}; wall {wall:.0f} s on {args.nodes} x {args.gpus} at {args.rate}")
    for name, seconds in probe_seconds(out / "n0").items():
        print(f"  {name}: {seconds:.1f} s")
    print((out / "0.log").read_text()[-600:])
    return 0 if codes == [0] * args.nodes else 1


if __name__ == "__main__":
    sys.exit(main())
