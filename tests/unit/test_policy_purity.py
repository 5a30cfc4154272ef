"""The pure core of recovery (correlate, policy, incidents, safety) stays pure: no cluster, Kafka or metrics
client is imported, and no clock is read (time is always passed in)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agent"
PURE = ("correlate", "policy", "incidents", "safety")
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
    tree = ast.parse((AGENT / f"{module}.py").read_text(encoding="utf-8"))
    calls = [
        (node.func.value.id, node.func.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
    ]
    assert [c for c in calls if c in CLOCK_CALLS] == []
