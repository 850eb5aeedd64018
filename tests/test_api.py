"""The public API is what __all__ says, and the command starts light."""

import subprocess
import sys
import types

import gpuprof


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
