"""The pure core (detect, correlate, policy, incidents, safety and the plain data they share) stays pure: no
cluster, Kafka or metrics client is imported, and no clock is read (time is always passed in). This is the
layering contract of DESIGN.md, checked on every run."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agent"
DETECT = tuple(f"detect.{p.stem}" for p in sorted((AGENT / "detect").glob("*.py")) if p.stem != "__init__")
PURE = ("model", "records", "correlate", "policy", "incidents", "safety", "detect", *DETECT)
CLOCK_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("time", "time"),
               ("time", "monotonic"), ("time", "perf_counter"), ("date", "today")}  # fmt: skip


def test_importing_the_pure_core_loads_no_io_client() -> None:
    code = (
        "import sys\n"
        + "".join(f"import agent.{m}\n" for m in PURE)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes_asyncio', 'aiokafka', 'prometheus_client', 'aiohttp'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("module", PURE)
def test_no_clock_reads(module: str) -> None:
    path = AGENT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = AGENT / module / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = [
        (node.func.value.id, node.func.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
    ]
    assert [c for c in calls if c in CLOCK_CALLS] == []


def test_test_file_names_are_unique() -> None:
    """pytest imports test modules by basename (no packages under tests/): two files with one name collide."""
    names = [p.name for p in (AGENT.parent / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
