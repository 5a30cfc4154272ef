"""The layering of DESIGN.md. The import graph (layers, the pure core importing no client, edge or I/O module,
the sources without a cycle) is import-linter's (``.importlinter``, run by ``make lint`` as ``lint-imports``, and
here so the unit tier holds it too). What an import graph cannot show is checked here over the source: the core
and the engine read no clock and open no file, by any alias (time is passed in, or read through the injected
clock port)."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "agent"
CHECKED = ("core", "engine")
"""The packages under agent/ that may not read a clock or open a file themselves."""

CLOCK_ATTRS = {
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "datetime.datetime.today",
    "datetime.date.today",
    "asyncio.get_running_loop",
    "asyncio.get_event_loop",
    "io.open",
    "os.open",
    "os.fdopen",
}
"""Dotted names (after resolving import aliases) whose mere mention reads the clock or opens a file."""

FILE_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes"}
"""Method names that read or write a file (pathlib, importlib.resources)."""

ALLOWED = {
    ("agent/core/detect/levels.py", "load_shipped_table"): "reads the fault-level table packaged with the agent "
    "(constant data, read once at start through importlib.resources), never a file of the cluster",
}
"""(file, function) -> why that function may do what the rule forbids."""


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    function: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function or '<module>'}: {self.what}"


class _ClockVisitor(ast.NodeVisitor):
    """Resolve import aliases (``import datetime as dt``, ``from time import monotonic``, ``from datetime import
    datetime as D``) and report every clock read or file open, whatever it is called."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.names: dict[str, str] = {}  # local name -> dotted name it stands for
        self.stack: list[str] = []
        self.found: list[Finding] = []

    def _add(self, node: ast.AST, what: str) -> None:
        function = ".".join(self.stack)
        if any(self.path == p and function.split(".")[-1] == f for p, f in ALLOWED) and self.stack:
            return
        self.found.append(Finding(self.path, getattr(node, "lineno", 0), function, what))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "time" or alias.name.startswith("time."):
                self._add(node, f"import {alias.name} (read time through the injected clock)")
            self.names[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            if module == "time":
                self._add(node, f"from time import {alias.name} (read time through the injected clock)")
            self.names[alias.asname or alias.name] = f"{module}.{alias.name}"

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _function

    def _dotted(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.names.get(node.id)
        if base is None:
            return None
        return ".".join([base, *reversed(parts)])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted in CLOCK_ATTRS:
            self._add(node, f"{dotted} (read time through the injected clock; open no file)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open" and "open" not in self.names:
            self._add(node, "open() (the core and the engine open no file)")
        if isinstance(func, ast.Attribute):
            if func.attr == "time" and not node.args and not node.keywords:
                self._add(node, ".time() (a loop's or a module's clock: use the injected clock)")
            if func.attr in FILE_METHODS:
                self._add(node, f".{func.attr}() (the core and the engine read no file)")
        self.generic_visit(node)


def clock_findings(path: Path, text: str | None = None) -> list[Finding]:
    """Every clock read or file open in the module at `path` (or in `text`, read as that module)."""
    rel = path.relative_to(REPO).as_posix()
    visitor = _ClockVisitor(rel)
    visitor.visit(ast.parse(text if text is not None else path.read_text(encoding="utf-8")))
    return visitor.found


def checked_files() -> list[Path]:
    return sorted(p for pkg in CHECKED for p in (AGENT / pkg).rglob("*.py"))


def test_the_core_and_the_engine_read_no_clock_and_open_no_file() -> None:
    found = [str(f) for p in checked_files() for f in clock_findings(p)]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("from time import monotonic\nx = monotonic()\n", id="from-time-import"),
        pytest.param("import time as t\nx = t.time()\n", id="time-alias"),
        pytest.param("import datetime as dt\nx = dt.datetime.now()\n", id="datetime-module-alias"),
        pytest.param("from datetime import datetime as D\nx = D.now()\n", id="datetime-class-alias"),
        pytest.param("from datetime import datetime\ndef f(clock=datetime.now): ...\n", id="now-as-default"),
        pytest.param("from datetime import date\nx = date.today()\n", id="date-today"),
        pytest.param("import asyncio\nasync def f():\n    return asyncio.get_running_loop().time()\n", id="loop"),
        pytest.param("def f(loop):\n    return loop.time()\n", id="loop-time"),
        pytest.param("def f(p):\n    with open(p) as fh:\n        return fh.read()\n", id="open"),
        pytest.param("def f(p):\n    return p.read_text()\n", id="read-text"),
    ],
)
def test_the_clock_rule_catches(source: str) -> None:
    """Each planted form is caught (a rule that cannot fail proves nothing)."""
    assert clock_findings(AGENT / "core" / "planted.py", source) != []


def test_the_clock_rule_leaves_time_passed_in_alone() -> None:
    source = (
        "from datetime import UTC, datetime, timedelta\n"
        "def f(now: datetime) -> datetime:\n"
        "    return now + timedelta(seconds=1)\n"
        "x = datetime.fromtimestamp(0, UTC)\n"
    )
    assert clock_findings(AGENT / "core" / "planted.py", source) == []


def test_the_import_contracts_hold() -> None:
    """`lint-imports` (the .importlinter contracts) passes on the tree as it is."""
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True, cwd=REPO, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_test_file_names_are_unique() -> None:
    """pytest imports test modules by basename (no packages under tests/): two files with one name collide."""
    names = [p.name for p in (AGENT.parent / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
