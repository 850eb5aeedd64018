"""Imported results as runs: nccl-tests logs (read by gpuprof.runs.nccl_log) become run
folders of the run format, one per job shape, through the ranks' own records and shard
consolidation, so every command reads them as any run. An imported run has one row per case
and cycle: the time nccl-tests printed (by default its mean over ranks and iterations)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.machine.env import gpuprof_version
from gpuprof.machine.hardware import gpu_peaks
from gpuprof.machine.systems import load_system
from gpuprof.runs.nccl_log import Block, Device, Log, Row, read_log
from gpuprof.runs.records import (
    SCHEMA_VERSION,
    CaseRecord,
    ShardWriter,
    Where,
    collective_case_id,
    shard_path,
    warn,
)
from gpuprof.runs.store import (
    RUN_JSON,
    check_out_dir,
    create_run_dir,
    update_run_json,
    utc_now,
    write_json_atomic,
)
from gpuprof.runs.tables import consolidate
from gpuprof.units import bus_factor


def shape_of(block: Block, path: Path, nodes: int | None, gpus: int | None) -> tuple[int, int]:
    """(nodes, GPUs per node) of a test: its rank lines' hosts, or as given."""
    if nodes and gpus:
        return nodes, gpus
    if not block.devices:
        raise UsageError(
            f"{path}:{block.first_line}: no '# Using devices' rank lines before this test: "
            "cannot tell the job's shape",
            "give --nodes and --gpus",
        )
    hosts: dict[str, int] = {}
    for device in block.devices:
        hosts[device.host] = hosts.get(device.host, 0) + 1
    if len(set(hosts.values())) != 1:
        raise UsageError(
            f"{path}:{block.first_line}: the hosts run different numbers of ranks "
            f"({', '.join(f'{h} {n}' for h, n in hosts.items())})",
            "give --nodes and --gpus",
        )
    return len(hosts), next(iter(hosts.values()))


def describe(log: Log, blocks: list[Block]) -> dict[str, Any]:
    """What run.json keeps of one imported log (the tests of it in this run)."""
    return {
        "file": str(log.path),
        "lines": log.lines,
        "tests": [
            {
                "program": f"{b.program}_perf" if b.program else None,
                "op": b.op,
                "line": b.first_line,
                "rows": len({(r.size_bytes, r.line) for r in b.rows}),
                "options": b.options,
                **({"stopped": b.stopped} if b.stopped else {}),
                **({"nccl_choices": choices} if (choices := nccl_choices(b)) else {}),
            }
            for b in blocks
        ],
        **({"skipped": log.skipped} if log.skipped else {}),
    }


def nccl_choices(block: Block) -> dict[str, list[str]]:
    """NCCL's algorithm/protocol per size where the log printed its per-call TUNING lines
    (`{"65536": ["tree/LL"]}`; both places' calls together)."""
    found: dict[int, set[str]] = {}
    for row in block.rows:
        if row.choices:
            found.setdefault(row.size_bytes, set()).update(row.choices)
    return {str(size): sorted(found[size]) for size in sorted(found)}


def measured_choices(info: dict[str, Any]) -> dict[tuple[str, int], str]:
    """NCCL's own choice (`tree/LL`) per op and size of an imported run whose log printed
    NCCL's per-call TUNING lines (run.json's `imported`, `nccl_choices`); only sizes with one
    choice over all its tests (with several the log does not say which call a time belongs
    to). By op and size: NCCL chooses by the bytes, whatever their type."""
    found: dict[tuple[str, int], set[str]] = {}
    for log in info.get("imported") or []:
        for test in log.get("tests", []) if isinstance(log, dict) else []:
            said = test.get("nccl_choices") if isinstance(test, dict) else None
            for size, choices in (said if isinstance(said, dict) else {}).items():
                if str(size).isdigit() and isinstance(choices, list):
                    key = (str(test.get("op")), int(size))
                    found.setdefault(key, set()).update(str(c) for c in choices)
    return {key: choices.pop() for key, choices in found.items() if len(choices) == 1}


def _hardware(spec: str | None) -> dict[str, Any] | None:
    """The system the logs were measured on (`--hardware`), kept whole in run.json so the run
    predicts on it without the file."""
    return asdict(load_system(spec)) if spec is not None else None


def _ranks_json(devices: tuple[Device, ...]) -> tuple[list[dict[str, Any]], list[Any]]:
    """run.json's `ranks` and `nodes` from the rank lines (hosts in order of first rank)."""
    hosts: dict[str, list[Device]] = {}
    for device in sorted(devices, key=lambda d: d.rank):
        hosts.setdefault(device.host, []).append(device)
    ranks, nodes = [], []
    for node, (host, mine) in enumerate(hosts.items()):
        for local, d in enumerate(mine):
            ranks.append(
                {
                    "rank": d.rank,
                    "local_rank": local,
                    "node_rank": node,
                    "host": host,
                    "device": f"cuda:{d.device}",
                    "pid": d.pid,
                    "gpu_name": d.name,
                    "pci_bus_id": d.bus,
                }
            )
        gpus = [{"nvml_index": d.device, "name": d.name, "pci_bus_id": d.bus} for d in mine]
        nodes.append({"node_rank": node, "host": host, "gpus": gpus})
    return sorted(ranks, key=lambda r: int(r["rank"])), nodes


@dataclass
class _Shape:
    """The tests of one job shape, from every log given: one run."""

    nodes: int
    gpus: int
    tests: list[tuple[Log, Block]] = field(default_factory=list)

    @property
    def devices(self) -> tuple[Device, ...]:
        return next((b.devices for _, b in self.tests if b.devices), ())


def _shapes(logs: list[Log], nodes: int | None, gpus: int | None) -> list[_Shape]:
    """The logs' tests grouped by job shape (checked before anything is written)."""
    shapes: dict[tuple[int, int], _Shape] = {}
    for log in logs:
        for block in log.blocks:
            key = shape_of(block, log.path, nodes, gpus)
            shapes.setdefault(key, _Shape(*key)).tests.append((log, block))
    for shape in shapes.values():
        if shape.nodes * shape.gpus < 2:
            where = shape.tests[0]
            raise UsageError(
                f"{where[0].path}:{where[1].first_line}: a test of one rank moves nothing",
                "import tests of 2 or more ranks",
            )
        for log, block in shape.tests:
            _check_ranks(log.path, block, shape.nodes, shape.gpus)
        devices = shape.devices
        if devices and len(devices) != shape.nodes * shape.gpus:
            raise UsageError(
                f"{shape.tests[0][0].path}: {len(devices)} rank lines for {shape.nodes} x "
                f"{shape.gpus} ranks",
                "give --nodes and --gpus that match the log",
            )
    return list(shapes.values())


def import_logs(
    paths: list[Path],
    out: Path,
    argv: list[str],
    probe: str,
    hardware: str | None = None,
    nodes: int | None = None,
    gpus: int | None = None,
) -> list[Path]:
    """nccl-tests logs -> one new run folder per job shape they hold (its collectives table,
    run.json with `source: nccl-tests`). Every log is read and checked before anything is
    written (`probe`: the collectives probe's name, whose table they fill); a case measured
    more than once (`-N` cycles, a test run again) keeps every time,
    one iteration each."""
    if not paths:
        raise UsageError("no log given", "gpuprof import nccl-tests all_reduce.log ...")
    system = _hardware(hardware)
    once: dict[Path, Path] = {}  # a file named twice is read once (its rows are not repeats)
    for path in paths:
        once.setdefault(path.resolve(), path)
    twice = [f"{p}: given more than once, read once" for p in paths if once[p.resolve()] is not p]
    logs = [read_log(path) for path in once.values()]
    if not any(log.rows for log in logs):
        why = next((line for log in logs for line in log.stopped), f"{paths[0]}: no result row")
        raise UsageError(f"no complete row in any test: {why}", "the log has no results")
    shapes = _shapes([log for log in logs if log.rows], nodes, gpus)
    if system is not None and hardware is not None:
        _check_gpus(shapes, hardware, str(system["gpu"]))
    check_out_dir(out)
    runs = [_write_run(shape, out, argv, system, probe) for shape in shapes if shape.tests]
    for line in twice + [line for log in logs for line in log.stopped + log.skipped]:
        warn(line)
    return runs


def _check_ranks(path: Path, block: Block, nodes: int, gpus: int) -> None:
    """A UsageError where the test's printed busbw / algbw (nccl-tests' bus factor) says
    another number of ranks than nodes x gpus: every bandwidth would be recomputed for the
    wrong count. Read at its largest algbw, where the printed digits are most exact; ops
    whose factor does not depend on the ranks say nothing."""
    printed = [r for r in block.rows if r.printed_bw and r.printed_bw[0] >= 1.0]
    if not block.op or bus_factor(block.op, 2) == bus_factor(block.op, 4) or not printed:
        return
    row = max(printed, key=lambda r: r.printed_bw or (0.0, 0.0))
    alg, bus = row.printed_bw or (1.0, 1.0)
    ratio, n = bus / alg, nodes * gpus
    if (
        abs(ratio - bus_factor(block.op, n))
        <= ratio * (0.005 / alg + 0.005 / max(bus, 0.005)) + 1e-9
    ):
        return
    limit = 2 * bus_factor(block.op, 2)  # the factor as the ranks grow: 2 or 1, less limit / n
    implied = f"{round(limit / (limit - ratio))} ranks" if ratio < limit else "another count"
    raise UsageError(
        f"{path}:{row.line}: busbw / algbw {bus:g} / {alg:g} is nccl-tests' bus factor of "
        f"{implied}, not of {nodes} x {gpus}",
        "give --nodes and --gpus of the job that printed the log",
    )


def _check_gpus(shapes: list[_Shape], hardware: str, gpu: str) -> None:
    """A UsageError where a log's rank lines name another GPU than --hardware's (where both
    are GPUs gpuprof knows): a calibration would carry one GPU's times to another."""
    want = gpu_peaks(gpu)
    for shape in shapes:
        for device in shape.devices:
            got = gpu_peaks(device.name)
            if want is not None and got is not None and got != want:
                raise UsageError(
                    f"{shape.tests[0][0].path}: measured on {device.name}, not on "
                    f"{hardware}'s {gpu}",
                    "give the --hardware of the system the log was measured on",
                )


def _write_run(
    shape: _Shape, out: Path, argv: list[str], system: dict[str, Any] | None, probe: str
) -> Path:
    ranks, node_list = _ranks_json(shape.devices)
    world = shape.nodes * shape.gpus
    logs = list(dict.fromkeys(log for log, _ in shape.tests))
    versions: dict[str, str] = {}
    env: dict[str, str] = {}
    for log in logs:
        versions, env = {**log.versions, **versions}, {**log.env, **env}
    run_dir = create_run_dir(out, "nccl-tests")
    info = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_dir.name,
        "created_utc": utc_now(),
        "measured_utc": None,  # when nccl-tests ran: its log does not say (created is the import)
        "argv": argv,
        "gpuprof_version": gpuprof_version(),
        "launcher": "import",
        "source": "nccl-tests",
        "imported": [describe(log, [b for lg, b in shape.tests if lg is log]) for log in logs],
        "num_nodes": shape.nodes,
        "gpus_per_node": shape.gpus,
        "world_size": world,
        "device": "cuda",
        "backend": "nccl",
        "suite": "nccl-tests",
        "probes": [probe],
        "model": None,
        "versions": versions,
        "env": env,
        "nodes": node_list,
        "ranks": ranks,
        "hardware": system,
        "status": "running",
        "failures": [],
    }
    write_json_atomic(run_dir / RUN_JSON, info)
    where = Where(
        rank=0,
        node_rank=0,
        host=ranks[0]["host"] if ranks else "unknown",
        scope="global",
        group="all",
        world_size=world,
        num_nodes=shape.nodes,
        group_rank=0,
    )
    cases: dict[str, list[Row]] = {}
    for _, block in shape.tests:
        for row in block.rows:
            case = collective_case_id(row.op, row.dtype, row.redop, row.in_place, row.size_bytes)
            cases.setdefault(case, []).append(row)
    writer = ShardWriter(shard_path(run_dir, 0))
    try:
        for case, rows in cases.items():
            first = rows[0]
            wrong = [r.nwrong for r in rows]
            record = CaseRecord(
                probe=probe,
                case_id=case,
                where=where,
                params={
                    "op": first.op,
                    "dtype": first.dtype,
                    "redop": first.redop,
                    "size_bytes": first.size_bytes,
                    "requested_bytes": first.size_bytes,
                    "count": first.count,
                    "in_place": first.in_place,
                    "root": first.root,
                },
                results={"nwrong": None if None in wrong else sum(w or 0 for w in wrong)},
                times_us=[t for r in rows for t in r.times_us],
            )
            writer.write(record.to_dict())
    finally:
        writer.close()
    tables = consolidate(run_dir)
    stopped = any(b.stopped for _, b in shape.tests)
    update_run_json(
        run_dir,
        status="partial" if stopped else "complete",
        finished_utc=utc_now(),
        tables=sorted(tables),
    )
    return run_dir
