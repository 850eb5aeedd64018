"""`gpuprof predict`: a thin click layer over `gpuprof.predict` (pandas and scipy are imported
inside the command)."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from gpuprof.cli.options import out_option
from gpuprof.errors import UsageError
from gpuprof.machine.systems import hardware_names
from gpuprof.params import ints
from gpuprof.specs.ddp import block_params
from gpuprof.units import parse_count, parse_size_list


def _node_list(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        nodes = ints(text)
    except ValueError:
        raise UsageError(
            f"invalid --nodes {text!r}: give whole numbers", "e.g. --nodes 2,4,8"
        ) from None
    if any(n < 1 or n > 1_000_000 for n in nodes):
        raise UsageError(f"invalid --nodes {text!r}: each between 1 and 1000000")
    return tuple(sorted(set(nodes)))


def _sizes(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()

    sizes = tuple(parse_size_list(text))
    if any(s <= 0 for s in sizes):
        raise UsageError(f"invalid --sizes {text!r}: each size must be positive", "e.g. 1M,1G")
    return sizes


def _positive(name: str, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be a positive number, got {value}")
    return value


@click.command()
@click.argument("run_spec", metavar="RUN")
@click.option("--nodes", "nodes_text", help="node counts, e.g. 2,4,8 [default: 1,2,4,...,1024]")
@click.option(
    "--gpus",
    "--gpus-per-node",
    "gpus",
    type=click.IntRange(1, 1024),
    help="ranks per node [default: the system's, else the run's]",
)
@click.option(
    "--sizes", "sizes_text", help="collective sizes, e.g. 1M,1G [default: the largest measured]"
)
@click.option("--model-params", help="predict for a model of this many parameters, e.g. 7B")
@click.option(
    "--hidden", type=click.IntRange(64, None), help="the model's hidden size (with --layers)"
)
@click.option("--layers", type=click.IntRange(1, None), help="the model's transformer blocks")
@click.option(
    "--compute-ms", type=float, help="one rank's step (forward, backward, optimizer) on the target"
)
@click.option(
    "--hardware",
    metavar="PRESET|FILE.toml",
    help=f"predict on this system: {hardware_names()}, or a .toml of your own",
)
@click.option("--nic-gbps", type=float, help="each NIC's line rate in Gbit/s (with --nics)")
@click.option(
    "--nics",
    type=click.IntRange(1, 1024),
    help="NICs per node [default: the preset's, or 1 per GPU]",
)
@click.option("--intra-gbps", type=float, help="what-if: each link inside a node in Gbit/s")
@click.option("--grad-dtype", type=click.Choice(["bf16", "fp16"]), help="what-if: 16-bit gradients")
@click.option("--bucket-mb", type=float, help="what-if: DDP bucket size")
@click.option(
    "--accum",
    type=click.IntRange(1, 1024),
    help="the job's gradient accumulation steps (the baseline's, not a what-if)",
)
@click.option("--micro-batches", "micro_text", help="pipeline micro-batch counts, e.g. 8,16")
@click.option(
    "--experts",
    type=click.IntRange(1, None),
    help="a MoE layer's experts in all, e.g. 256 [default: as many a rank as the run had]",
)
@click.option(
    "--calibrate-with",
    "also",
    multiple=True,
    metavar="RUN",
    help="another run on the same system (e.g. more nodes): it calibrates too, the nearest "
    "measured node count predicting each row, two counts across nodes the growth between "
    "them (repeatable)",
)
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
@out_option
def predict(run_spec: str, fmt: str, out: str, also: tuple[str, ...], **kw: Any) -> None:
    """Predict collectives, the DDP step and the pipeline step at other node counts, on other
    hardware or for another model: from the run's own fits (alpha-beta per op and link), or
    on a described system (--hardware) under NCCL's own cost model.

    Example: gpuprof predict latest --hardware dgx-h100 --nodes 1,2,4,16,128
    """
    # deferred: loads pandas
    from gpuprof.analysis.summary import Analyzed
    from gpuprof.predict.predictions import predict as run_predict
    from gpuprof.predict.whatifs import DEFAULT_NODES, PredictRequest
    from gpuprof.runs.store import open_run

    for name in ("compute_ms", "nic_gbps", "intra_gbps", "bucket_mb"):
        _positive("--" + name.replace("_", "-"), kw[name])
    if kw["nics"] is not None and kw["nic_gbps"] is None and kw["hardware"] is None:
        raise UsageError("--nics needs --nic-gbps (or --hardware)", "e.g. --nic-gbps 400 --nics 8")
    if (kw["hidden"] is None) != (kw["layers"] is None):
        raise UsageError("--hidden and --layers go together", "or give --model-params")
    if kw["hidden"] is not None and kw["hidden"] % 64:
        raise UsageError(f"--hidden must be a multiple of 64, got {kw['hidden']}")
    params = parse_count(kw["model_params"]) if kw["model_params"] is not None else None
    if kw["hidden"] is not None:
        params = kw["layers"] * block_params(kw["hidden"])
    if params is not None and params < 1:
        raise UsageError("--model-params must be positive")
    micro: tuple[int, ...] = ()
    if kw["micro_text"] is not None:
        try:
            micro = ints(kw["micro_text"])
        except ValueError as exc:
            raise UsageError(f"invalid --micro-batches: {exc}", "e.g. 8,16") from None
        if min(micro) < 1:
            raise UsageError("--micro-batches must be positive")
    request = PredictRequest(
        nodes=_node_list(kw["nodes_text"]) or DEFAULT_NODES,
        gpus=kw["gpus"],
        sizes=_sizes(kw["sizes_text"]),
        model_params=params,
        compute_ms=kw["compute_ms"],
        hardware=kw["hardware"],
        nic_gbps=kw["nic_gbps"],
        nics=kw["nics"],
        intra_gbps=kw["intra_gbps"],
        grad_dtype=kw["grad_dtype"],
        bucket_mb=kw["bucket_mb"],
        accum=kw["accum"],
        micro_batches=micro,
        experts=kw["experts"],
    )
    others = tuple(Analyzed(open_run(spec, out)) for spec in also)
    found = run_predict(Analyzed(open_run(run_spec, out)), request, others)
    if fmt == "json":
        click.echo(json.dumps(found.to_dict(), indent=1, default=str))
    else:
        # deferred: loads pandas
        from gpuprof.predict.text import format_prediction

        click.echo(format_prediction(found))


PREDICT_COMMANDS = (predict,)
