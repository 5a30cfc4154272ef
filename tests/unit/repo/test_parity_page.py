"""docs/mindcluster-parity.md: every test it cites exists, so a renamed or deleted test cannot leave a row stale."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "mindcluster-parity.md"
# `tests/x/test_y.py`, `tests/x/test_y.py::test_z[param]`, or `::test_z` meaning the file cited just before it
REF = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+)(?:\[[^\]`]*\])?)?`")


def _cited() -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        last: str | None = None
        for m in REF.finditer(line):
            path, name = m.group(1), m.group(2)
            if path is None and name is None:
                continue
            last = path or last
            assert last is not None, f"{m.group(0)} names no file: {line[:80]}"
            out.append((last, name))
    return out


def test_the_page_cites_tests() -> None:
    assert len(_cited()) >= 30


def test_every_cited_test_exists() -> None:
    missing = []
    for path, name in _cited():
        file = ROOT / path
        if not file.is_file():
            missing.append(path)
        elif name is not None and not re.search(rf"^(async )?def {name}\(", file.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert missing == []


def test_every_row_has_four_cells() -> None:
    rows = [ln for ln in PAGE.read_text(encoding="utf-8").splitlines() if ln.startswith("| ") and "---" not in ln]
    bad = [r[:60] for r in rows if r.count(" | ") != 3]
    assert bad == []
