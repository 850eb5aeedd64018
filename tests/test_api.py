"""The public API is what __all__ says, and the command starts light."""

import subprocess
import sys
import types
from pathlib import Path

import pytest

import gpuprof

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_the_public_api() -> None:
    public = {
        name
        for name in dir(gpuprof)
        if not name.startswith("_") and not isinstance(getattr(gpuprof, name), types.ModuleType)
    } | {"Run", "open_run"}
    assert set(gpuprof.__all__) - {"__version__"} == public - {"TYPE_CHECKING", "Any"}
    for name in gpuprof.__all__:
        assert getattr(gpuprof, name) is not None


def test_the_command_starts_without_torch_or_pandas() -> None:
    """`gpuprof --help` and every command's parsing stay fast: the commands load torch,
    pandas and plotly when they run (which modules may import what at all is the import
    contracts' job, tests/test_architecture.py)."""
    code = (
        "import sys, gpuprof, gpuprof.cli;"
        "bad = [m for m in ('torch', 'pynvml', 'pandas', 'plotly') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_version_is_the_code_s_own_installed_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source tree on PYTHONPATH that pip never installed (how a GPU box without registry
    access runs it) has no distribution metadata, yet `--version` and the runs'
    gpuprof_version name the code's version, which pyproject.toml's must match."""
    from importlib import metadata

    from click.testing import CliRunner

    from gpuprof.cli import cli
    from gpuprof.machine.env import gpuprof_version

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert gpuprof.__version__ == declared == gpuprof_version()
    done = CliRunner().invoke(cli, ["--version"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == f"gpuprof, version {declared}"
