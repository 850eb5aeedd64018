"""`--model package.module:factory`: checked in the launcher before any rank starts, without
importing the module (which would import torch there): the module must be found from the
working folder or PYTHONPATH, and define `factory` at its top level."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

from gpuprof.errors import UsageError
from gpuprof.registry import Option

HINT = "e.g. --model mypackage.models:build, where build() returns (model, make_batch)"


# one declaration for every probe that trains a model (ddp, sharded, pipeline): a sweep gives
# them one value
MODEL_OPTION = Option(
    flag="--model",
    field="model",
    help="model: your own, package.module:factory (factory() returns (model, make_batch); "
    "make_batch(device) returns one micro-batch; for pipeline an nn.Sequential, or a third "
    "item: its stages) instead of the synthetic one; --model-params then only sizes the "
    "estimate",
)


def add_working_folder() -> None:
    """Import from the working folder, as `python -m` does (ranks and the launcher alike)."""
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)


def check_model_spec(spec: str) -> None:
    """A UsageError naming what is wrong with `spec`, or nothing."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise UsageError(f"--model {spec!r}: expected package.module:function", HINT)
    add_working_folder()  # the ranks import from it too
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        raise UsageError(f"--model {spec}: cannot find {module_name} ({exc})", HINT) from None
    if found is None:
        raise UsageError(
            f"--model {spec}: no module {module_name} in the working folder or on PYTHONPATH",
            HINT,
        )
    origin = found.origin
    if not origin or not origin.endswith(".py"):
        return  # a compiled or namespace module: the ranks check it when they import it
    try:
        tree = ast.parse(Path(origin).read_text(encoding="utf-8"), filename=origin)
    except (OSError, SyntaxError, ValueError) as exc:
        raise UsageError(f"--model {spec}: cannot read {origin}: {exc}") from None
    if attr not in _top_level_names(tree):
        raise UsageError(f"--model {spec}: {origin} defines no {attr!r} at its top level", HINT)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names
