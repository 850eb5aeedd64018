"""Malformed invocations, table-driven: each exits 2 with one line that names the problem, no
traceback, nothing on stdout, nothing written and nothing launched. Plus property-based tests
of the parsers behind the options."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpuprof.errors import UsageError
from gpuprof.params import csv, floats, ints
from gpuprof.specs.ddp import parse_variant
from gpuprof.units import MAX_SIZES, format_size, parse_size, parse_size_list, size_range
from tests.conftest import Gp

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "p2p-mesh-slow-link"

SWEEP = [
    (["--op", "all_gatherr"], "unknown op 'all_gatherr'"),
    (["--op", ""], "invalid --op ''"),
    (["--op", "all_reduce,"], "invalid --op"),
    (["--sizes", "1K,1Q"], "invalid size '1Q'"),
    (["--sizes", ""], "empty size list"),
    (["--sizes", "1K,,2K"], "empty item in the size list"),
    (["-b", "1Q"], "invalid size '1Q'"),
    (["-b", "0"], "--min-bytes must be positive"),
    (["-b", "1M", "-e", "1K"], "larger than --max-bytes"),
    (["-e", "1T"], "of host memory"),
    (["--sizes", "1K", "-b", "8"], "cannot be combined"),
    (["--factor", "0"], "--factor must be a number greater than 1"),
    (["--factor", "1"], "--factor must be a number greater than 1"),
    (["--factor", "nan"], "--factor must be a number greater than 1"),
    (["-b", "1K", "-e", "64K", "--factor", "1.0000001"], f"at most {MAX_SIZES}"),
    (["--dtype", "float64"], "unknown dtype 'float64'"),
    (["--dtype", ""], "invalid --dtype"),
    (["--redop", "prod"], "unknown reduce op"),
    (["--mode", "sideways"], "Invalid value for '--mode'"),
    (["--scopes", "galaxy"], "unknown scope"),
    (["--scopes", ""], "invalid --scopes"),
    (["--budget-ms", "0"], "invalid --budget-ms"),
    (["--budget-ms", "-1"], "invalid --budget-ms"),
    (["--budget-ms", "inf"], "invalid --budget-ms"),
    (["--budget-ms", "nan"], "invalid --budget-ms"),
    (["--warmup", "-1"], "invalid --warmup"),
    (["--min-iters", "0"], "invalid --min-iters"),
    (["--max-iters", "0"], "invalid --max-iters"),
    (["--min-iters", "10", "--max-iters", "5"], "iteration counts"),
    (["--gpus", "0"], "--gpus must be at least 1"),
    (["--gpus", "-3"], "--gpus must be at least 1"),
    (["--gpus", "10000"], "pass --force"),
    (["--nodes", "0"], "Invalid value for '--nodes'"),
    (["--nodes", "2"], "needs --launcher manual or slurm"),
    (["--launcher", "manual", "--nodes", "2"], "needs --master-addr"),
    (["--launcher", "manual", "--nodes", "2", "--master-addr", "h", "--node-rank", "5"], "outside"),
    (["--launcher", "slurm"], "outside a Slurm allocation"),
    (["--launcher", "mpi"], "Invalid value for '--launcher'"),
    (["--master-port", "70000"], "Invalid value for '--master-port'"),
    (["--master-port", "-1"], "Invalid value for '--master-port'"),
    (["--master-port", "0"], "Invalid value for '--master-port'"),
    (["--timeout", "0"], "--timeout must be a positive number"),
    (["--timeout", "-5"], "--timeout must be a positive number"),
    (["--timeout", "nan"], "--timeout must be a positive number"),
    (["--timeout", "inf"], "--timeout must be a positive number"),
    (["--telemetry-hz", "5000"], "--telemetry-hz must be between 0 and 1000"),
    (["--telemetry-hz", "nan"], "--telemetry-hz must be between 0 and 1000"),
    (["--link-gbps", "0"], "Invalid value for '--link-gbps'"),
    (["--link-gbps", "inf"], "--link-gbps must be a positive number"),
    (["--link-gbps", "fast"], "Invalid value for '--link-gbps'"),
    (["--prom-textfile", "/nonexistent/dir/g.prom"], "/nonexistent/dir is not a folder"),
    (["--prom-textfile", "/tmp"], "Invalid value for '--prom-textfile'"),
    (["--tag", "../x"], "invalid --tag"),
    (["--tag", ""], "invalid --tag"),
    (["--suite", "huge"], "Invalid value for '--suite'"),
    (["--device", "tpu"], "Invalid value for '--device'"),
    (["--bogus"], "No such option"),
    (["--probes", "bogus"], "unknown probe 'bogus'"),
    (["--probes", ""], "invalid --probes"),
    (["--probes", "collectives,,p2p"], "invalid --probes"),
    (["--p2p-bytes", "0"], "p2p sizes must be positive"),
    (["--p2p-modes", "warp"], "unknown p2p mode"),
    (["--copy-bytes", "1Q"], "invalid size '1Q'"),
    (["--kinds", "teleport"], "unknown copy kind"),
    (["--matmul-n", "0"], "invalid --matmul-n"),
    (["--matmul-dtypes", "float64"], "unknown matmul dtype"),
    (["--model-params", "10X"], "invalid count '10X'"),
    (["--hidden", "65"], "--hidden must be a multiple of 64"),
    (["--hidden", "64", "--layers", "0"], "invalid --layers"),
    (["--batch", "0"], "invalid --batch"),
    (["--seq", "-1"], "invalid --seq"),
    (["--ddp-variants", ""], "invalid --ddp-variants"),
    (["--ddp-variants", "turbo"], "unknown DDP variant 'turbo'"),
    (["--ddp-variants", "bucket=0"], "unknown DDP variant"),
    (["--ddp-variants", "accum=0"], "unknown DDP variant"),
    (["--schedules", "Foo"], "unknown pipeline schedule"),
    (["--micro-batches", ""], "invalid --micro-batches"),
    (["--micro-batches", "4,x"], "invalid --micro-batches"),
    (["--micro-batches", "0"], "--micro-batches must be positive"),
    (["--stage-weights", "1,1,1"], "--stage-weights has 3 entries for 2 stages"),
    (["--stage-weights", "1,nan"], "invalid --stage-weights"),
    (["--stage-weights", "1,-1"], "--stage-weights must be positive"),
    (["--chunks", "1"], "--chunks at least 2"),
    (["--pp-hidden", "0"], "invalid --pp-hidden"),
    (["--resume", "99"], "no run '99'"),
    (["--strategies", ""], "invalid --strategies ''"),
    (["--strategies", "zero9"], "unknown strategy 'zero9'"),
    (["--strategies", "ddp,,fsdp"], "an empty item"),
    (["--model-params", "0"], "--model-params must be positive"),
    (["--tp-layers", "conv"], "unknown tensor-parallel layer 'conv'"),
    (["--tp-hidden", "100"], "--tp-hidden must be a positive multiple of 64"),
    (["--tp-hidden", "0"], "invalid --tp-hidden 0"),
    (["--tp-batch", "0"], "invalid --tp-batch 0"),
    (["--probes", "tp", "--tp-hidden", "192", "--gpus", "2"], "3 heads (--tp-hidden 192 / 64)"),
]


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything would be launched or measured."""
    from gpuprof.launch import runner

    def launched(*args: object, **kwargs: object) -> None:
        raise AssertionError("launched")

    for name in ("_home_node", "_helper_node", "_inline"):
        monkeypatch.setattr(runner, name, launched)
    for name in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


def _one_clean_line(result: object) -> None:
    code, out, err = result.code, result.out, result.err  # type: ignore[attr-defined]
    assert code == 2, (code, err)
    assert err.startswith("gpuprof: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(("args", "message"), SWEEP, ids=[" ".join(a) for a, _ in SWEEP])
def test_bad_sweep_input(
    tmp_path: Path, gp: Gp, no_launch: None, args: list[str], message: str
) -> None:
    out = tmp_path / "runs"
    result = gp("sweep", "--device", "cpu", "--out", str(out), *args)
    _one_clean_line(result)
    assert message in result.err, result.err
    assert not out.exists()  # nothing written


OTHER = [
    (["run", "collectives", "--matmul-n", "5"], "No such option"),  # another probe's option
    (["run", "memory", "--op", "all_reduce"], "No such option"),
    (["run", "bogus"], "No such command"),
    (["run", "pipeline", "--budget-ms", "inf"], "invalid --budget-ms"),
    (["show", "latest"], "no runs under"),
    (["show", "RUN", "--table", "telemetry"], "'telemetry' is not one of"),
    (["show", "RUN", "--format", "xml"], "Invalid value for '--format'"),
    (["report", "nope"], "no run 'nope'"),
    (["report", "RUN", "-o", "/nonexistent/dir/r.html"], "is not a folder"),
    (["consolidate", "nope"], "no run 'nope'"),
    (["env", "--format", "xml"], "Invalid value for '--format'"),
    (["--debug", "sweep", "--device", "cpu", "--gpus", "0"], "--gpus must be at least 1"),
    (["sweep", "--debug", "--device", "cpu", "--timeout", "nan"], "--timeout must be"),
    (["predict", "nope"], "no run 'nope'"),
    (["predict", "RUN"], "no collective measured at 2 or more sizes"),
    (["predict", "RUN", "--nodes", "0"], "invalid --nodes"),
    (["predict", "RUN", "--nodes", ""], "invalid --nodes"),
    (["predict", "RUN", "--nodes", "2,,4"], "invalid --nodes"),
    (["predict", "RUN", "--nodes", "1e3"], "invalid --nodes '1e3': give whole numbers"),
    (["predict", "RUN", "--sizes", "0"], "each size must be positive"),
    (["predict", "RUN", "--hidden", "100", "--layers", "2"], "--hidden must be a multiple of 64"),
    (["predict", "RUN", "--hidden", "128"], "--hidden and --layers go together"),
    (["predict", "RUN", "--nic-gbps", "nan"], "--nic-gbps must be a positive number"),
    (["predict", "RUN", "--nics", "4"], "--nics needs --nic-gbps"),
    (["predict", "RUN", "--compute-ms", "-1"], "--compute-ms must be a positive number"),
    (["predict", "RUN", "--hardware", "dgx-z"], "unknown hardware 'dgx-z'"),
    (["predict", "RUN", "--hardware", "nope.toml"], "cannot read nope.toml"),
    (["predict", "RUN", "--model-params", "lots"], "invalid count"),
    (["predict", "RUN", "--micro-batches", "0"], "--micro-batches must be positive"),
    (["predict", "RUN", "--sizes", "1K,,2K"], "size"),
    (["predict", "RUN", "--gpus", "0"], "Invalid value for '--gpus'"),
    (["export", "prometheus", "nope"], "no run 'nope'"),
    (["export", "prometheus", "RUN", "-o", "/nonexistent/x.prom"], "is not a folder"),
    (["export", "nccl-tests", "RUN"], "has no collectives or moe table"),
    (["export", "csv", "RUN"], "No such command"),
    (["show", "RUN", "--table", "p2p", "--format", "nccl-tests"], "is for --table collectives"),
]


@pytest.mark.parametrize(("args", "message"), OTHER, ids=[" ".join(a) for a, _ in OTHER])
def test_bad_input_to_other_commands(
    tmp_path: Path, gp: Gp, no_launch: None, args: list[str], message: str
) -> None:
    run = tmp_path / "runs" / "0001_golden"
    shutil.copytree(GOLDEN, run)
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*"))
    argv = [str(run) if a == "RUN" else a for a in args]
    result = gp(*argv, "--out", str(tmp_path / "empty")) if args[0] != "env" else gp(*argv)
    if "--debug" in args:  # the traceback first, then the same line and the same exit code
        assert result.code == 2 and result.err.strip().splitlines()[-1].startswith("gpuprof:")
        assert message in result.err
    else:
        _one_clean_line(result)
        assert message in result.err, result.err
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*")) == before
    assert not (tmp_path / "empty").exists()


def test_the_tables_hold_at_least_sixty_cases() -> None:
    assert len(SWEEP) + len(OTHER) >= 60


# -- the parsers, for every input hypothesis can think of ------------------------------------

UNITS = st.sampled_from(["", "K", "M", "G", "k", "m", "KiB", "MB", "B"])


@given(st.integers(min_value=0, max_value=2**20), UNITS)
def test_parse_size_reads_what_format_size_means(number: int, unit: str) -> None:
    scale = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit[:1].upper() or ""]
    assert parse_size(f"{number}{unit}") == number * scale


@given(st.text(max_size=12))
def test_parse_size_accepts_or_says_why(text: str) -> None:
    try:
        assert parse_size(text) >= 0
    except UsageError as exc:
        assert "invalid size" in exc.one_line()


@given(st.lists(st.integers(min_value=1, max_value=1 << 30), min_size=1, max_size=20))
def test_size_lists_round_trip(sizes: list[int]) -> None:
    assert parse_size_list(",".join(str(s) for s in sizes)) == sizes
    with pytest.raises(UsageError):
        parse_size_list(",".join(str(s) for s in sizes) + ",")


@given(
    st.integers(min_value=1, max_value=1 << 20),
    st.integers(min_value=0, max_value=1 << 20),
    st.one_of(st.floats(min_value=-10, max_value=100), st.sampled_from([float("nan"), 1e308])),
)
@example(1, 1, 1.5)  # found by a random run: 1, int(1.5) = 1 repeated a size
def test_size_range_is_bounded_sorted_or_refused(low: int, extra: int, factor: float) -> None:
    high = low + extra
    try:
        sizes = size_range(low, high, factor)
    except UsageError as exc:
        assert "--factor" in exc.one_line() or format_size(low) in exc.one_line()
        return
    assert 1 <= len(sizes) <= MAX_SIZES
    assert sizes[0] == low and sizes[-1] <= high and sizes == sorted(set(sizes))


VARIANT_PARTS = st.sampled_from(
    ["default", "bucket=5", "bucket=0.5", "grad_view", "static_graph", "hook=fp16", "hook=bf16",
     "hook=allreduce", "accum=2", "amp", "bucket=0", "accum=0", "hook=int8", "turbo", ""]
)  # fmt: skip


@given(st.lists(VARIANT_PARTS, min_size=1, max_size=4))
def test_variants_parse_or_are_refused_by_name(parts: list[str]) -> None:
    name = "+".join(parts)
    bad = {"bucket=0", "accum=0", "hook=int8", "turbo", ""}
    try:
        settings = parse_variant(name)
    except UsageError as exc:
        assert bad & set(parts) and "unknown DDP variant" in exc.one_line()
        return
    assert not bad & set(parts)
    assert settings["accum"] >= 1 and settings["bucket_cap_mb"] > 0


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=8))
def test_stage_weights_parse_finite_or_refuse(weights: list[float]) -> None:
    text = ",".join(repr(w) for w in weights)
    try:
        parsed = floats(text)
    except ValueError:
        assert any(w != w or w in (float("inf"), float("-inf")) for w in weights)
        return
    assert list(parsed) == weights


@given(st.lists(st.integers(min_value=-5, max_value=64), min_size=1, max_size=8))
def test_micro_batches_parse(counts: list[int]) -> None:
    assert ints(",".join(str(c) for c in counts)) == tuple(counts)


@given(st.lists(st.text(alphabet="abc_ ", max_size=5), min_size=1, max_size=5))
def test_csv_has_no_empty_items(items: list[str]) -> None:
    text = ",".join(items)
    try:
        parsed = csv(text)
    except ValueError:
        assert any(not i.strip() for i in items)
        return
    assert all(parsed) and len(parsed) == len(items)


def test_a_port_someone_listens_on_is_refused_before_launch(gp: Gp, tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = gp(
            "sweep", "--device", "cpu", "--launcher", "local", "--master-port", str(port),
            "--out", str(tmp_path), "--dry-run",
        )  # fmt: skip
    assert result.code == 2 and f"port {port} is not free" in result.err
    assert not list(tmp_path.iterdir())
