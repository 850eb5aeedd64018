"""The public API is what __all__ says, and light commands do not import torch."""

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


def test_light_modules_do_not_import_torch() -> None:
    code = (
        "import sys, gpuprof, gpuprof.cli, gpuprof.analysis.bandwidth, gpuprof.reports.html, "
        "gpuprof.records, gpuprof.store, gpuprof.launch;"
        "bad = [m for m in ('torch', 'pynvml') if m in sys.modules]; print(bad); "
        "sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_records_need_neither_torch_nor_pandas() -> None:
    code = (
        "import sys, gpuprof.records;"
        "sys.exit(int('pandas' in sys.modules or 'torch' in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
