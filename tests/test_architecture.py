"""The layout keeps its promises: the import contracts in pyproject.toml hold (and a deliberate
violation breaks them), the top level stays a short list of foundations, every package says
what it does, no module outgrows one job, and every function-level import says why it is one."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpuprof"
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
# what a function-level import may defer: packages that cost start-up time or may be absent
HEAVY = {"torch", "pynvml", "plotly", "scipy", "pandas", "numpy", "pyarrow"}
# submodules whose import is heavy on its own: it scripts functional optimizers (torch.jit)
HEAVY_SUBMODULES = {"torch.distributed.optim"}


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the package under `tree` (its pyproject.toml, its gpuprof)."""
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tree), "PATH": str(Path(sys.executable).parent), "COLUMNS": "300"},
        timeout=300,
    )


def scratch_copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(PACKAGE, tree / "gpuprof", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # a probe reaching the report, even inside a function
        (
            "probes/collectives.py",
            "def _leak() -> None:\n    import gpuprof.reports.html  # noqa\n",
            "The rank side never reaches",
        ),
        # the analysis pulling torch in through a function
        ("analysis/ddp.py", "def _leak() -> None:\n    import torch  # noqa\n", "neither torch"),
        # a circle hidden behind TYPE_CHECKING
        (
            "machine/topology.py",
            "from typing import TYPE_CHECKING\n\n"
            "if TYPE_CHECKING:\n    import gpuprof.machine.node\n",
            "No import circles",
        ),
    ],
)
def test_a_violation_breaks_a_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    tree = scratch_copy(tmp_path)
    target = tree / "gpuprof" / module
    target.write_text(target.read_text() + "\n\n" + line)
    result = lint_imports(tree)
    assert result.returncode != 0, result.stdout
    broken = [row for row in result.stdout.splitlines() if row.rstrip().endswith("BROKEN")]
    assert any(contract in row for row in broken), result.stdout


def test_the_top_level_is_foundations_only() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 8, modules
    for package in (p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc and "import" in doc, f"{package.name}/__init__.py: say what it may import"


def test_no_module_outgrows_one_job() -> None:
    sizes = {p: len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert not {str(p.relative_to(ROOT)): n for p, n in sizes.items() if n > 400}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _top_level_imports(name: str) -> set[str]:
    """What importing module `name` imports at once (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(MODULES[name].read_text())
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.update(_targets(node))
            elif isinstance(node, (ast.If, ast.Try, ast.ClassDef)):
                visit(node.body)
                visit(getattr(node, "orelse", []))

    visit(tree.body)
    return found


def _targets(node: ast.ImportFrom) -> list[str]:
    assert node.module is not None
    full = [f"{node.module}.{a.name}" for a in node.names]
    return [name if name in MODULES else node.module for name in full]


def _loads(name: str, seen: set[str] | None = None) -> set[str]:
    """Third-party top-level packages that importing `name` loads (transitively)."""
    seen = set() if seen is None else seen
    seen.add(name)
    parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
    loaded = set()
    for dep in (*_top_level_imports(name), *parents):
        if dep in MODULES:
            if dep not in seen:
                loaded |= _loads(dep, seen)
        else:
            loaded.add(dep.split(".")[0])
    if loaded & {"pandas", "scipy"}:
        loaded.add("numpy")
    return loaded


def _deferred_imports() -> list[tuple[str, ast.stmt, list[str], bool]]:
    """(module, import node, source lines, inside a try that catches ImportError)."""
    found = []
    for name, path in MODULES.items():
        lines = path.read_text().splitlines()
        for func in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            optional = {
                id(stmt)
                for node in ast.walk(func)
                if isinstance(node, ast.Try)
                and any(
                    "ImportError" in ast.unparse(h.type or ast.Constant(0)) for h in node.handlers
                )
                for stmt in node.body
            }
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found.append((name, node, lines, id(node) in optional))
    return found


def test_function_level_imports_defer_something_heavy_and_say_so() -> None:
    """A function-level import defers a heavy or optional package the module does not load
    already (never hides a circle), and a comment on it, above it or on its `try` says so."""
    wrong = []
    for name, node, lines, optional in _deferred_imports():
        if isinstance(node, ast.ImportFrom):
            targets = _targets(node)
        else:
            targets = [a.name for a in node.names]
        brings: set[str] = set()
        for target in targets:
            brings |= _loads(target) if target in MODULES else {target.split(".")[0]}
            brings |= {target} & HEAVY_SUBMODULES
        heavy = (brings & (HEAVY | HEAVY_SUBMODULES)) - _loads(name)
        said = _said(lines, node.lineno - 1)
        if not (heavy or optional) or not said:
            wrong.append(
                f"{MODULES[name].relative_to(ROOT)}:{node.lineno} {lines[node.lineno - 1]}"
            )
    assert not wrong, "\n".join(wrong)


def _said(lines: list[str], index: int) -> bool:
    """Whether the import at `index` (0-based) says why: a comment on it, on another import of
    its contiguous group, or on the line the group follows (a comment, or a `try:` line)."""
    while index >= 0 and lines[index].strip().startswith(("from ", "import ", ")")):
        if "#" in lines[index]:
            return True
        index -= 1
    return index >= 0 and lines[index].strip().startswith(("#", "try:")) and "#" in lines[index]
