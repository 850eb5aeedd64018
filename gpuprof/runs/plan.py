"""What a sweep measures: the job's shape, the probes to run and each probe's parameters (no
torch here). `build_plan` is the one place a plan is made from command-line options; the
launcher writes it to `plan.json` and the ranks measure exactly that.

`plan.json` keeps one object per registered probe at the top level (`"<probe>": {...}`), so a
run's plan says what every probe would have measured; `probes` lists those that ran.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gpuprof import registry
from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, check_choices

SUITES = registry.SUITES
DEVICES = ("auto", "cuda", "cpu")
_SHAPE_FIELDS = ("num_nodes", "gpus_per_node", "device", "suite", "probes")
_RUN_FIELDS = ("case_timeout_s", "telemetry_hz", "link_gbps")

P = TypeVar("P", bound=ProbeParams)


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    """Everything the ranks need to know to run a sweep; written to `plan.json`.

    `params` maps a probe name to its parameters; a registered probe left out gets its
    parameters' defaults."""

    num_nodes: int = 1
    gpus_per_node: int = 1
    device: str = "auto"
    suite: str = "quick"
    probes: tuple[str, ...] = ()  # empty: every registered probe
    params: Mapping[str, ProbeParams] = field(default_factory=dict)
    case_timeout_s: float = 300.0
    telemetry_hz: float = 10.0  # one sampler per node; 0 turns telemetry off
    link_gbps: float | None = None  # each node's network rate the estimate assumed

    def __post_init__(self) -> None:
        specs = registry.specs()
        if not self.probes:
            object.__setattr__(self, "probes", tuple(specs))
        full = {name: self.params.get(name) or spec.params() for name, spec in specs.items()}
        object.__setattr__(self, "params", full)
        if self.num_nodes < 1:
            raise UsageError(f"--nodes must be at least 1, got {self.num_nodes}")
        if self.gpus_per_node < 1:
            raise UsageError(
                f"--gpus must be at least 1, got {self.gpus_per_node}",
                "give the number of ranks per node",
            )
        check_choices("device", (self.device,), DEVICES)
        check_choices("suite", (self.suite,), SUITES)
        check_choices("probe", self.probes, tuple(specs))
        if not (math.isfinite(self.case_timeout_s) and self.case_timeout_s > 0):
            raise UsageError(
                f"--timeout must be a positive number of seconds, got {self.case_timeout_s}"
            )
        if self.link_gbps is not None and not (
            math.isfinite(self.link_gbps) and self.link_gbps > 0
        ):
            raise UsageError(f"--link-gbps must be a positive number, got {self.link_gbps}")
        if not 0 <= self.telemetry_hz <= 1000:
            raise UsageError(f"--telemetry-hz must be between 0 and 1000, got {self.telemetry_hz}")
        for name in self.probes:
            self.params[name].check_job(self.num_nodes, self.gpus_per_node, self.device)

    @property
    def world_size(self) -> int:
        """Ranks in the whole job."""
        return self.num_nodes * self.gpus_per_node

    def of(self, name: str, kind: type[P]) -> P:
        """Probe `name`'s parameters, checked to be of `kind`."""
        params = self.params[name]
        if not isinstance(params, kind):
            raise TypeError(f"{name} parameters are {type(params).__name__}, not {kind.__name__}")
        return params

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the layout of `plan.json`)."""
        data: dict[str, Any] = {key: getattr(self, key) for key in _SHAPE_FIELDS}
        data["probes"] = list(self.probes)
        data.update({name: params.to_dict() for name, params in self.params.items()})
        data.update({key: getattr(self, key) for key in _RUN_FIELDS})
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepPlan:
        """Inverse of to_dict (a probe missing from an older plan gets its defaults)."""
        specs = registry.specs()
        known = {k: data[k] for k in (*_SHAPE_FIELDS, *_RUN_FIELDS) if k in data}
        known["probes"] = tuple(known.get("probes", ()))
        params = {
            name: spec.params.from_dict(data[name]) for name, spec in specs.items() if name in data
        }
        return cls(**known, params=params)

    def with_device(self, device: str) -> SweepPlan:
        """The same plan with the device resolved (auto -> cuda or cpu)."""
        return replace(self, device=device)


def estimates(plan: SweepPlan) -> list[registry.Estimate]:
    """Each probe's cases and estimated seconds in this plan's job."""
    return [
        registry.estimate(
            registry.get(name),
            plan.params[name],
            plan.num_nodes,
            plan.gpus_per_node,
            plan.link_gbps,
            registry.CPU_RANK_TFLOPS if plan.device == "cpu" else None,
        )
        for name in plan.probes
    ]


def estimated_seconds(plan: SweepPlan) -> float:
    """The whole sweep: every probe's estimate plus launching and reporting."""
    return registry.JOB_OVERHEAD_S + sum(e.seconds for e in estimates(plan))


def build_plan(
    probes: tuple[str, ...],
    opts: Mapping[str, Any],
    *,
    nodes: int,
    gpus: int,
    suite: str,
    device: str,
    timeout: float = 300.0,
    telemetry_hz: float = 10.0,
    link_gbps: float | None = None,
) -> SweepPlan:
    """The plan for a job of `nodes` x `gpus` ranks on `device` (cpu or cuda): each probe's
    suite preset for the device with the options given applied (None = not given). No
    probes named: the suite's own (every probe; the `ci` suite's for the device)."""
    check_choices("suite", (suite,), SUITES)
    probes = probes or registry.suite_probes(suite, device)
    check_choices("probe", probes, registry.names())
    params = {
        name: registry.params_for(spec, suite, device, opts, nodes, gpus)
        for name, spec in registry.specs().items()
    }
    return SweepPlan(
        num_nodes=nodes,
        gpus_per_node=gpus,
        device=device,
        suite=suite,
        probes=probes,
        params=params,
        case_timeout_s=timeout,
        telemetry_hz=telemetry_hz,
        link_gbps=link_gbps,
    )
