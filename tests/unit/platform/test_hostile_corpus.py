"""`fault-agent detect` over the hostile-input corpus (tests/fixtures/hostile, written by its make_corpus.py): no
file crashes it, each gives the exit code, fault levels and rejection reasons of its entry in expected.json, and a
directory of all of them (plus a dangling symlink) is reported file by file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main

CORPUS = Path(__file__).parent.parent.parent / "fixtures" / "hostile"
EXPECTED: dict[str, dict[str, Any]] = json.loads((CORPUS / "expected.json").read_text())
NOW = "2026-01-01T09:00:00Z"


def _detect(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["detect", "--now", NOW, "--json", "-f", str(path)])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out else None, out.err


def test_the_corpus_lists_every_file() -> None:
    files = {p.name for p in CORPUS.iterdir() if p.suffix in (".json", ".yaml")} - {"expected.json"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_hostile_file(capsys: pytest.CaptureFixture[str], name: str) -> None:
    want = EXPECTED[name]
    code, doc, err = _detect(capsys, CORPUS / name)
    assert "Traceback" not in err
    assert "detector failed" not in err
    assert code == want["exit"]
    if doc is None:  # one file that cannot be read at all: one line on stderr saying why
        assert want["reasons"] == ["unreadable-file"]
        assert err.startswith(f"fault-agent detect: {CORPUS / name}: nested more than 64 levels deep")
        return
    assert [f["level"] for f in doc["faults"]] == want["levels"]
    assert [r["reason"] for r in doc["rejections"]] == want["reasons"]
    assert want["says"] in " ".join(r["detail"] for r in doc["rejections"])
    for r in doc["rejections"]:
        for python_name in ("list", "dict", "NoneType", "str", "int", "bool"):
            assert f"got {python_name}" not in r["detail"]


def test_the_whole_corpus_as_one_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for name in EXPECTED:
        shutil.copy(CORPUS / name, tmp_path / name)
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "gone.yaml")
    code, doc, err = _detect(capsys, tmp_path)
    assert "Traceback" not in err
    assert code == 2  # some files cannot be read: said after the report
    assert doc is not None
    unreadable = {Path(r["source"]).name for r in doc["rejections"] if r["reason"] == "unreadable-file"}
    assert unreadable == {n for n, w in EXPECTED.items() if w["exit"] == 2} | {"dangling.yaml"}
    # the readable files' faults are all there (public faults of one resource and fault id are held once)
    levels = sorted(f["level"] for f in doc["faults"])
    assert levels == sorted(lv for w in EXPECTED.values() if w["exit"] == 0 for lv in w["levels"])
