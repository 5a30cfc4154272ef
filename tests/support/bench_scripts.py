"""Load a script of bench/ as a module for unit tests of its pure functions (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_script(file: str, name: str) -> ModuleType:
    """bench/`file` imported as module `name` (registered in sys.modules: dataclasses look their module up), with
    bench/ on the path while it loads (the scripts import their neighbours, e.g. e2e_common)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / file)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))
