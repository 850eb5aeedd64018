"""The probe registry is the one list of probes: walk it and check that every probe brings
everything gpuprof derives from it, and that no other module spells a probe's name."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuprof import registry
from gpuprof.cli import cli
from gpuprof.params import ProbeParams
from gpuprof.runs.plan import SweepPlan, build_plan

ROOT = Path(__file__).resolve().parent.parent
NAMES = registry.names()


def test_registry_lists_probes_in_sweep_order_with_unique_options() -> None:
    assert NAMES[:6] == ("collectives", "p2p", "memory", "compute", "ddp", "pipeline")
    # a flag is declared once: probes that share it share the declaration (one object)
    declared = {o.flag: o for o in registry.all_options()}
    for spec in registry.specs().values():
        for option in spec.options:
            assert declared[option.flag] is option, f"{option.flag} declared twice"
    assert len(declared) == len(registry.all_options())
    names = registry.option_names()
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", NAMES)
def test_every_probe_has_what_gpuprof_derives_from_it(name: str) -> None:
    spec = registry.get(name)
    assert spec.name == name and spec.help and "Example: gpuprof run" in spec.help
    # a `gpuprof run` subcommand with the probe's own options and the iteration options
    command = cli.commands["run"].commands[name]  # type: ignore[attr-defined]
    params = {p.name for p in command.params}
    assert spec.options, "a probe declares at least one option"
    for option in (*spec.options, *registry.ITERATION_OPTIONS):
        assert option.name in params
        assert option.field is None or option.field in spec.params.__dataclass_fields__
    # the sweep takes them too
    sweep_params = {p.name for p in cli.commands["sweep"].params}
    assert {o.name for o in spec.options} <= sweep_params
    # suite presets for both devices, valid parameters of the declared class
    for suite in registry.SUITES:
        for device in registry.DEVICES_MEASURED:
            preset = registry.preset(spec, suite, device)
            assert isinstance(preset, spec.params) and isinstance(preset, ProbeParams)
            assert spec.params.from_dict(preset.to_dict()) == preset
    # the rank side exists and has run(); the references resolve to callables
    rank = importlib.import_module(spec.rank_module)
    assert callable(rank.run)
    for ref in (spec.summarize, spec.section, *([spec.advice] if spec.advice else [])):
        assert callable(registry.load(ref)), ref
    assert spec.columns and all(len(c) == 2 for c in spec.columns)
    assert spec.metrics and all(m.keys for m in spec.metrics)
    assert set(spec.ci_devices) <= set(registry.DEVICES_MEASURED)


def _gloo_tests() -> dict[str, list[str]]:
    """probe -> tests marked `gloo(probe)`: real multi-process gloo runs of that probe."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and ast.unparse(deco.func) == "pytest.mark.gloo"
                    and deco.args
                    and isinstance(deco.args[0], ast.Constant)
                ):
                    found.setdefault(str(deco.args[0].value), []).append(
                        f"{path.name}::{node.name}"
                    )
    return found


@pytest.mark.parametrize("name", NAMES)
def test_every_probe_has_a_real_multi_process_gloo_test(name: str) -> None:
    assert _gloo_tests().get(name), f"no test marked @pytest.mark.gloo({name!r})"


def _own_files(spec: registry.ProbeSpec) -> set[Path]:
    refs = [spec.rank_module, spec.summarize, spec.section, spec.advice]
    modules = {r.partition(":")[0] for r in refs if r}
    modules.add(next(m for m in registry.SPEC_MODULES if registry.load(f"{m}:SPEC") is spec))
    files = set()
    for module in modules:
        found = importlib.util.find_spec(module)
        assert found is not None and found.origin is not None
        files.add(Path(found.origin).resolve())
    return files


# a word that is a probe's name and, in one declared line, something else
HOMONYMS = {("ddp", "gpuprof/specs/sharded.py", 'DDP, ZERO1, FSDP = "ddp", "zero1", "fsdp"')}


@pytest.mark.parametrize("name", NAMES)
def test_a_probe_name_is_spelled_only_in_its_own_modules(name: str) -> None:
    """`"<name>"` appears in the probe's own modules only (the registry names those), except
    a strategy of the sharded probe named like the DDP probe, in its one declaration."""
    own = _own_files(registry.get(name))
    elsewhere = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "gpuprof").rglob("*.py"))
        if path.resolve() not in own
        for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1)
        if f'"{name}"' in line and (name, str(path.relative_to(ROOT)), line.strip()) not in HOMONYMS
    ]
    assert not elsewhere, f'"{name}" spelled outside its modules: {elsewhere}'


def test_no_module_over_400_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "gpuprof").rglob("*.py")
        if (n := len(p.read_text("utf-8").splitlines())) > 400
    }
    assert not long


def test_plan_json_keeps_one_object_per_probe() -> None:
    plan = build_plan(("ddp",), {"layers": 3}, nodes=1, gpus=2, suite="quick", device="cpu")
    data = plan.to_dict()
    assert set(NAMES) <= set(data) and data["probes"] == ["ddp"]
    assert data["ddp"]["layers"] == 3
    assert SweepPlan.from_dict(data) == plan


def _without_torch(*commands: list[str]) -> None:
    """Run these gpuprof commands in a fresh Python: each succeeds and torch is not imported."""
    each = "try:\n    main({!r})\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
    code = "import sys; from gpuprof.cli import main\n" + "".join(map(each.format, commands))
    code += "assert 'torch' not in sys.modules, 'torch was imported'"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_read_only_commands_do_not_import_torch() -> None:
    mesh = "tests/data/p2p-mesh-slow-link"
    _without_torch(
        ["show", mesh, "--table", "p2p"],
        ["show", "--help"],
        ["predict", mesh],
        ["report", mesh, "-o", "/dev/null"],
    )


def test_planning_cpu_ranks_does_not_import_torch() -> None:
    """The launcher of CPU ranks asks torch nothing (its ranks do): importing it cost 3-4 s
    of every launch, an A/B check's pairs among them."""
    _without_torch(["sweep", "--device", "cpu", "--gpus", "2", "--dry-run"])


@pytest.mark.parametrize("name", NAMES)
def test_every_probe_module_has_a_torchrun_main(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", registry.get(name).rank_module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "--budget-ms" in done.stdout
    for option in registry.get(name).options:
        assert option.flag in done.stdout


def test_case_counts_match_a_real_run(two_rank_run: Path) -> None:
    """The estimate's case counts are the cases a real 2-rank run recorded one after another
    (one node, so no two groups of one scope ran at the same time, but the ceilings' `node`
    scope: every rank in a group of its own, all at once)."""
    from gpuprof import open_run
    from gpuprof.runs.plan import estimates
    from gpuprof.runs.store import read_json

    run = open_run(two_rank_run)
    plan = SweepPlan.from_dict(read_json(run.path / "plan.json"))
    for estimate in estimates(plan):
        table = run.table(estimate.probe)
        together = table["scope"] == "node"
        table = table.assign(group=table["group"].where(~together, "all at once"))
        recorded = len(table.groupby(["scope", "world_size", "group", "case_id"]))
        skipped = [s for s in run.info.get("skipped", []) if s["probe"] == estimate.probe]
        assert estimate.cases == recorded + len(skipped), estimate
        assert estimate.seconds > 0


def test_dry_run_says_what_it_will_run_and_how_long(gp: Any, tmp_path: Path) -> None:
    result = gp("sweep", "--device", "cpu", "--dry-run", "--out", str(tmp_path / "r"))
    assert result.code == 0
    lines = result.out.splitlines()
    assert any(line.startswith("# collectives: ") and " cases, about " in line for line in lines)
    assert any(line.startswith("# in all about ") for line in lines)
    assert not (tmp_path / "r").exists()


def test_studies_join_from_the_standard_suite() -> None:
    """The quick suite keeps to its first look; the training-strategy studies run from the
    standard suite on, or in any suite when named."""
    quick = registry.suite_probes("quick", "cpu")
    assert quick == NAMES[:6] and registry.beyond_quick() == ("sharded", "tp", "moe", "concurrent")
    assert (
        registry.suite_probes("standard", "cuda") == NAMES == registry.suite_probes("full", "cpu")
    )
    plan = build_plan(("tp",), {}, nodes=1, gpus=2, suite="quick", device="cpu")
    assert plan.probes == ("tp",)


def test_the_quick_suite_thins_on_more_than_one_node() -> None:
    """Across nodes the quick suite's heaviest probes keep to a few minutes; one node keeps
    the suite as it is, and the standard suite is never thinned."""
    one = build_plan((), {}, nodes=1, gpus=2, suite="quick", device="cpu")
    two = build_plan((), {}, nodes=2, gpus=2, suite="quick", device="cpu", link_gbps=0.2)
    for name in NAMES:
        assert one.params[name] == registry.get(name).suite("quick", "cpu"), name
    coll = two.params["collectives"]
    assert coll.sizes == (1 << 10, 32 << 10, 1 << 20)  # type: ignore[attr-defined]
    assert (coll.warmup_iters, coll.min_iters) == (1, 3)
    assert two.params["ddp"].variants == ("default", "hook=fp16")  # type: ignore[attr-defined]
    assert two.params["pipeline"].micro_batch_counts(4) == (4,)  # type: ignore[attr-defined]
    gpu = build_plan((), {}, nodes=2, gpus=8, suite="quick", device="cuda")
    assert max(gpu.params["collectives"].sizes) == 1 << 30  # type: ignore[attr-defined]
    standard = build_plan((), {}, nodes=2, gpus=2, suite="standard", device="cpu")
    assert standard.params["collectives"] == registry.get("collectives").suite("standard", "cpu")
    # the estimate, which knows the 200 Mbit/s link, is within the 2-minute goal
    from gpuprof.runs.plan import estimated_seconds

    assert estimated_seconds(two) < 120
    full_quick = build_plan(
        (),
        {"min_bytes": "1K", "max_bytes": "16M", "factor": 4.0, "warmup_iters": 3, "min_iters": 5},
        nodes=2,
        gpus=2,
        suite="quick",
        device="cpu",
        link_gbps=0.2,
    )
    assert estimated_seconds(full_quick) > 3 * estimated_seconds(two)


def test_the_estimate_adds_what_the_link_takes() -> None:
    """One all_reduce of 8 MiB over the inter scope of 2 nodes at 0.1 Gbit/s: the ring sends
    2 x (n-1)/n x S = S per NIC per iteration, t = S x 8 / 1e8 s; the case adds (warmup +
    check) x t and min_iters x t less the budget it already counts."""
    from gpuprof.specs.collectives import CollectivesParams

    spec = registry.get("collectives")
    params = CollectivesParams(
        ops=("all_reduce",),
        sizes=(8 << 20,),
        scopes=("inter",),
        warmup_iters=1,
        min_iters=3,
        budget_s=0.1,
    )
    t = (8 << 20) * 8 / 1e8
    base = 0.1 + spec.case_overhead_s
    assert registry.estimate(spec, params, 2, 1).seconds == pytest.approx(base)
    found = registry.estimate(spec, params, 2, 1, link_gbps=0.1).seconds
    assert found == pytest.approx(base + 2 * t + 3 * t - 0.1)
    # rails: both local ranks' rings cross the same NIC at once
    rails = CollectivesParams(
        ops=("all_reduce",), sizes=(8 << 20,), scopes=("rails",), warmup_iters=0, min_iters=1
    )
    found = registry.estimate(spec, rails, 2, 2, link_gbps=0.1).seconds
    assert found == pytest.approx(rails.budget_s + spec.case_overhead_s + 2 * t + 2 * t - 0.1)


def test_the_link_rate_is_the_interface_the_ranks_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.machine import env

    nics = [
        {"name": "lo", "up": True, "speed_mbps": 0},
        {"name": "eth0", "up": True, "speed_mbps": 1000},
        {"name": "ib0", "up": True, "speed_mbps": 200000},
        {"name": "eth9", "up": False, "speed_mbps": 400000},
    ]
    monkeypatch.setattr(env, "nics", lambda: nics)
    for var in env.SOCKET_IFNAME_VARS:
        monkeypatch.delenv(var, raising=False)
    assert env.link_gbps() == 200.0  # the fastest one up
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth")
    assert env.link_gbps() == 1.0  # a prefix, as NCCL and gloo read it
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "^eth")
    assert env.link_gbps() == 1.0  # an exclusion list names no interface: the next variable
    monkeypatch.setattr(env, "nics", lambda: nics[:1])
    assert env.link_gbps() is None


def test_dry_run_on_nodes_names_the_link_rate(gp: Any, tmp_path: Path) -> None:
    common = ["sweep", "--device", "cpu", "--nodes", "2", "--launcher", "manual"]
    common += ["--master-addr", "127.0.0.1", "--dry-run", "--out", str(tmp_path / "r")]
    result = gp(*common, "--link-gbps", "0.2")
    assert result.code == 0, result.out
    assert "over a 0.2 Gbit/s link" in result.out
    assert not (tmp_path / "r").exists()


def test_the_sweep_time_does_not_grow_with_the_cluster() -> None:
    """The dry run's estimate on 8-GPU nodes: the default suite at 128 and 1,024 nodes within
    1.5x of 2 nodes (per-node probes run on every node at once, p2p samples node pairs), and
    the standard suite on 2 x 8 within 15 minutes."""
    from gpuprof.runs.plan import estimated_seconds

    def seconds(nodes: int, suite: str = "quick") -> float:
        return estimated_seconds(
            build_plan((), {}, nodes=nodes, gpus=8, suite=suite, device="cuda")
        )

    two = seconds(2)
    assert seconds(128) <= 1.5 * two and seconds(1024) <= 1.5 * two
    assert seconds(2, "standard") <= 15 * 60
    # the standard suite measures bfloat16 where the dtype changes the work (reducing ops)
    std = build_plan((), {}, nodes=2, gpus=8, suite="standard", device="cuda")
    coll = std.params["collectives"]
    assert coll.dtypes == ("float32", "bfloat16") and coll.reduce_dtypes_only  # type: ignore[attr-defined]
    named = build_plan((), {"dtypes": "float32,bfloat16"}, nodes=2, gpus=8, suite="standard",
                       device="cuda")  # fmt: skip
    assert not named.params["collectives"].reduce_dtypes_only  # type: ignore[attr-defined]
