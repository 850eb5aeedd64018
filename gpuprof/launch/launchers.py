"""Which launcher runs a sweep, and the command each node runs under it.

- `local`: one node, torchrun with its rendezvous on loopback; one rank alone is started
  directly, without torchrun (`solo_launch`).
- `manual`: the same `gpuprof sweep` on every node with `--node-rank K --master-addr HOST`;
  each node runs torchrun with the static rendezvous (it works inside network namespaces,
  where c10d failed to find its own address). Node 0 holds the run folder; other nodes keep a
  copy of their own shards and send every record to node 0 through the process group.
- `slurm` (`gpuprof.launch.slurm`): inside an allocation, `srun` starts one torchrun per node.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpuprof.errors import UsageError
from gpuprof.launch.slurm import check_slurm, in_step, slurm_command, step_config
from gpuprof.launch.torchrun import (
    DEFAULT_PORT,
    LaunchConfig,
    NodeLaunch,
    check_port_free,
    node_launch,
    solo_launch,
    static_rdzv,
)
from gpuprof.machine.env import detect_launcher
from gpuprof.runs.plan import SweepPlan

LAUNCHERS = ("auto", "local", "manual", "slurm")


def resolve_launcher(requested: str, environ: Mapping[str, str] | None = None) -> str:
    """auto -> 'torchrun' in a torchrun worker, else 'slurm' in an allocation, else local."""
    if requested != "auto":
        return requested
    return detect_launcher(environ)


def node_command(
    plan: SweepPlan,
    cfg: LaunchConfig,
    *,
    run_dir: Path | None,
    out: Path,
    handoff: Path | None = None,
) -> NodeLaunch:
    """What this node runs: node 0 (or the only node) holds the run folder."""
    if cfg.launcher == "local":
        if plan.num_nodes == 1 and plan.gpus_per_node == 1 and not cfg.master_port:
            return solo_launch(plan, run_dir=run_dir, home=True)
        # without --master-port, the rendezvous store binds a free port itself (c10d on port
        # 0, as torchrun --standalone): a port picked here and bound later by torchrun can be
        # taken in between by another job on a busy machine (EADDRINUSE)
        rdzv = (
            static_rdzv(0, "127.0.0.1", cfg.master_port)
            if cfg.master_port
            else ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--rdzv-id",
                  "gpuprof-local"]
        )  # fmt: skip
        return node_launch(plan, 0, rdzv, run_dir=run_dir, home=True)
    if cfg.launcher == "manual":
        assert cfg.master_addr is not None
        rdzv = static_rdzv(cfg.node_rank, cfg.master_addr, cfg.master_port or DEFAULT_PORT)
        if cfg.node_rank == 0:
            return node_launch(plan, 0, rdzv, run_dir=run_dir, home=True)
        return node_launch(plan, cfg.node_rank, rdzv, out=out, handoff=handoff)
    if cfg.launcher == "slurm":
        return slurm_command(plan, cfg, run_dir)
    raise UsageError(f"unknown launcher {cfg.launcher!r}", f"choose from {', '.join(LAUNCHERS)}")


# a manual launch's preview names each node's command up to this many nodes; beyond, node 0's
# and node 1's, and says how the others differ (a line per node of 1,024 helps nobody)
PREVIEW_NODES = 4


def dry_run_commands(plan: SweepPlan, cfg: LaunchConfig, out: Path) -> list[str]:
    """Every command the launch would run, one line per node (manual: one per node rank, or on
    many nodes the first two and how the rest differ)."""
    run_dir = out / "NNNN_<tag>"
    if cfg.launcher == "manual":
        lines = []
        shown = plan.num_nodes if plan.num_nodes <= PREVIEW_NODES else 2
        for node in range(shown):
            node_cfg = LaunchConfig(
                launcher="manual",
                node_rank=node,
                master_addr=cfg.master_addr,
                master_port=cfg.master_port,
            )
            launch = node_command(plan, node_cfg, run_dir=run_dir, out=out)
            lines.append(f"# node {node}\n{launch.shell()}")
        if shown < plan.num_nodes:
            lines.append(
                f"# nodes 2 to {plan.num_nodes - 1}: node 1's command with --node-rank set to "
                "the node's number"
            )
        return lines
    return [node_command(plan, cfg, run_dir=run_dir, out=out).shell()]


def check_launch(plan: SweepPlan, cfg: LaunchConfig) -> LaunchConfig:
    """Validate the launcher against the plan and the environment; fill in defaults. Inside
    an srun step, `slurm` runs this node's ranks (gpuprof.launch.slurm.step_config)."""
    if cfg.launcher == "slurm" and in_step():
        cfg = step_config(plan, cfg)
    # the node that hosts the rendezvous store must be able to listen on its port
    if cfg.launcher == "local" and cfg.master_port is not None:
        check_port_free(cfg.master_port)
    elif cfg.launcher == "slurm" or (cfg.launcher == "manual" and cfg.node_rank == 0):
        check_port_free(cfg.master_port or DEFAULT_PORT)
    if cfg.launcher == "local" and plan.num_nodes != 1:
        raise UsageError(
            f"--nodes {plan.num_nodes} needs --launcher manual or slurm",
            "the local launcher runs one node",
        )
    if cfg.launcher == "manual":
        if not cfg.master_addr:
            raise UsageError("--launcher manual needs --master-addr", "give node 0's address")
        if not 0 <= cfg.node_rank < plan.num_nodes:
            raise UsageError(f"--node-rank {cfg.node_rank} is outside 0..{plan.num_nodes - 1}")
    if cfg.launcher == "slurm":
        check_slurm(plan)
    return cfg
