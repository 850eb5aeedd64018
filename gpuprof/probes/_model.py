"""The model the training probes (ddp, sharded) train: gpuprof's synthetic transformer, or the
user's own, `--model package.module:factory`.

The factory takes no argument and returns `(model, make_batch)`: an `nn.Module` and a function
of the device that returns one micro-batch (a tensor, a tuple of positional inputs, or a dict
of keyword inputs). It is called on every rank with the same seed, so every rank builds the
same weights. The loss is the model's output when that is one number (or has a `.loss`, or is
a dict with a "loss"), else the mean square of the output (the synthetic model's stand-in loss:
a backward through every parameter that uses the output)."""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from gpuprof.probes._harness import Unsupported
from gpuprof.specs.ddp import ModelParams
from gpuprof.specs.user_model import add_working_folder


@dataclass
class TrainModel:
    """A model on the device and a function that makes one micro-batch for it."""

    module: nn.Module
    make_batch: Callable[[], Any]


def load_factory(spec: str) -> Callable[[], Any]:
    """The factory named `package.module:name`, imported from the working folder or
    PYTHONPATH; Unsupported (the case's skip) with the reason when it cannot be."""
    module_name, _, attr = spec.partition(":")
    add_working_folder()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: any error in it is its own
        raise Unsupported(f"--model {spec}: importing {module_name} failed: {exc!r}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise Unsupported(f"--model {spec}: {module_name} has no function {attr!r}")
    return factory  # type: ignore[no-any-return]


def _call_factory(spec: str) -> tuple[nn.Module, Callable[..., Any], list[nn.Module] | None]:
    """The factory's (model, make_batch[, stages]), checked; built with the same seed on every
    rank."""
    factory = load_factory(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)  # the same weights on every rank
        try:
            built = factory()
        except Exception as exc:  # the user's code: any error in it is its own
            raise Unsupported(f"--model {spec}: the factory raised {exc!r}") from None
    ok = (
        isinstance(built, tuple)
        and len(built) in (2, 3)
        and isinstance(built[0], nn.Module)
        and callable(built[1])
    )
    stages = built[2] if ok and len(built) == 3 else None
    if stages is not None and (
        not isinstance(stages, list | tuple) or not all(isinstance(m, nn.Module) for m in stages)
    ):
        ok = False
    if not ok:
        raise Unsupported(
            f"--model {spec}: the factory returned {type(built).__name__}; expected "
            "(nn.Module, make_batch) where make_batch(device) returns one micro-batch"
        )
    return built[0], built[1], list(stages) if stages is not None else None


def _batches(spec: str, make_batch: Callable[..., Any], device: torch.device, seed: int) -> Any:
    def batch() -> Any:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            try:
                return make_batch(device)
            except Exception as exc:
                raise Unsupported(f"--model {spec}: make_batch raised {exc!r}") from None

    return batch


def _user_model(spec: str, device: torch.device, rank: int) -> TrainModel:
    module, make_batch, _ = _call_factory(spec)
    return TrainModel(
        module=module.to(device), make_batch=_batches(spec, make_batch, device, 1000 + rank)
    )


def split_by_parameters(model: nn.Module, parts: int) -> list[nn.Module]:
    """A sequential model's children in `parts` contiguous stages of about equal parameters."""
    children = list(model.children())
    if not isinstance(model, nn.Sequential) or len(children) < parts:
        raise Unsupported(
            f"a pipeline of {parts} stages needs an nn.Sequential of at least {parts} modules "
            f"(got {type(model).__name__} with {len(children)}), or the stages from the "
            "factory (a third item)"
        )
    sizes = [sum(p.numel() for p in child.parameters()) for child in children]
    bounds = _balanced_bounds(sizes, parts)
    return [nn.Sequential(*children[a:b]) for a, b in itertools.pairwise(bounds)]


def _balanced_bounds(sizes: list[int], parts: int) -> list[int]:
    """Cut points of `sizes` into `parts` non-empty contiguous runs whose largest sum is as
    small as it can be (the linear partition problem, by dynamic programming)."""
    n = len(sizes)
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    inf = float("inf")
    # best[k][i]: the smallest largest-run sum of sizes[:i] in k runs; cut[k][i]: its last cut
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    for k in range(1, parts + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    bounds, i = [n], n
    for k in range(parts, 0, -1):
        i = cut[k][i]
        bounds.append(i)
    return bounds[::-1]


def pipeline_stages(
    spec: str, device: torch.device, num_stages: int
) -> tuple[list[nn.Module], Callable[[], Any]]:
    """The user's model as `num_stages` stages (theirs, or split evenly by parameters; on
    the CPU, to move the ones a rank holds) and its batch function (the same on every rank)."""
    module, make_batch, stages = _call_factory(spec)
    if stages is None:
        stages = split_by_parameters(module, num_stages)
    if len(stages) != num_stages:
        raise Unsupported(
            f"--model {spec}: {len(stages)} stages given for a pipeline of {num_stages}"
        )
    return stages, _batches(spec, make_batch, device, 7)


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention and a 4x MLP (12 h^2 + 13 h)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, h))
        out: torch.Tensor = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return out


def synthetic_model(hidden: int, layers: int, device: torch.device) -> nn.Module:
    """`layers` blocks of width `hidden` (64 per head) and a final norm, seeded identically
    on every rank; nothing is downloaded. Initialised on `device` itself: on one CPU thread
    (a GPU rank's) the 125M parameters of the GPU ci suite took about 1 s a model."""
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), device:
        torch.manual_seed(1234)
        blocks = [Block(hidden, max(1, hidden // 64)) for _ in range(layers)]
        return nn.Sequential(*blocks, nn.LayerNorm(hidden))


def synthetic(params: ModelParams, device: torch.device, rank: int) -> TrainModel:
    """The synthetic transformer and its random batch (`batch` x `seq` x `hidden`)."""
    hidden, layers = params.shape
    gen = torch.Generator(device=device).manual_seed(1000 + rank)

    def batch() -> torch.Tensor:
        return torch.randn(params.batch, params.seq, hidden, device=device, generator=gen)

    return TrainModel(module=synthetic_model(hidden, layers, device), make_batch=batch)


def build(params: ModelParams, device: torch.device, rank: int) -> TrainModel:
    """The model the parameters name, on `device`."""
    if params.model:
        return _user_model(params.model, device, rank)
    return synthetic(params, device, rank)


def forward_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """The loss of one micro-batch (see the module's docstring)."""
    if isinstance(batch, dict):
        out = model(**batch)
    elif isinstance(batch, tuple | list):
        out = model(*batch)
    else:
        out = model(batch)
    return loss_of(out)


def loss_of(out: Any) -> torch.Tensor:
    """A scalar to call backward on, from a model's output."""
    if isinstance(out, torch.Tensor):
        return out if out.numel() == 1 else out.float().square().mean()
    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
        return loss_of(out[0])
    raise Unsupported(
        f"the model's output ({type(out).__name__}) is neither a tensor nor has a loss"
    )


def samples(batch: Any) -> int:
    """The samples in a micro-batch: the leading dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch
    for value in values if isinstance(values, tuple | list) or isinstance(batch, dict) else []:
        if isinstance(value, torch.Tensor):
            return samples(value)
    return 1


def cast_batch(batch: Any, dtype: torch.dtype) -> Any:
    """The batch's floating-point tensors in `dtype` (for a twin that computes in it)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(dtype) if batch.is_floating_point() else batch
    if isinstance(batch, dict):
        return {k: cast_batch(v, dtype) for k, v in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(cast_batch(v, dtype) for v in batch)
    return batch
