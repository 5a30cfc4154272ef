"""The Markdown the project ships renders as meant: every code fence is a fence line of its own and fences pair up
(issue 41, 8: deploy/README.md had ``` Kafka credentials``` on a closing fence line, so the rest of the file
rendered as code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = sorted([ROOT / "README.md", ROOT / "deploy" / "README.md", *(ROOT / "docs").glob("*.md")])
OPENING = re.compile(r"^ {0,3}```[A-Za-z0-9_+-]*\s*$")  # ``` or ```lang
CLOSING = re.compile(r"^ {0,3}```\s*$")


def fence_problems(text: str) -> list[str]:
    """Lines where a fence is malformed: an info string on a closing fence, text after it, or a fence left open."""
    problems: list[str] = []
    open_at = 0
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.lstrip().startswith("```"):
            continue
        if open_at:
            if not CLOSING.match(line):
                problems.append(f"line {n}: text after a closing fence: {line.strip()!r}")
            open_at = 0
        elif OPENING.match(line):
            open_at = n
        else:
            problems.append(f"line {n}: an opening fence with more than a language: {line.strip()!r}")
    if open_at:
        problems.append(f"line {open_at}: a fence never closed")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_fences_pair_up(path: Path) -> None:
    assert fence_problems(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("```sh\nx\n```\n", 0, id="fine"),
        pytest.param("```sh\nx\n``` words\nmore\n", 1, id="text-after-closing"),
        pytest.param("```sh\nx\n", 1, id="never-closed"),
    ],
)
def test_the_check_finds_what_it_looks_for(text: str, expected: int) -> None:
    assert len(fence_problems(text)) == expected
