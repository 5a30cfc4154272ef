"""The committed MindCluster-format fixtures (tests/fixtures/mindcluster/ and the per-node deviceinfo-*/nodeinfo-*
of tests/fixtures/) are exactly what the Go generator (testbed/mcencode) writes: a fixture edited by hand, or a
generator change not re-run, fails here. Needs only the Go toolchain."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "testbed" / "mcencode"
FIXTURES = ROOT / "tests" / "fixtures" / "mindcluster"


def test_fixtures_are_the_generators_output(tmp_path: Path) -> None:
    go = shutil.which("go")
    assert go is not None, "the Go toolchain is a prerequisite (README)"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "CGO_ENABLED": "0"}
    out, top = tmp_path / "mindcluster", tmp_path / "top"
    cmd = [go, "run", ".", "fixtures", "-out", str(out), "-top", str(top)]
    subprocess.run(cmd, cwd=GENERATOR, env=env, check=True, timeout=300)
    made = {p.name: p.read_bytes() for p in out.iterdir()}
    committed = {p.name: p.read_bytes() for p in FIXTURES.iterdir() if not p.name.startswith("docs-")}
    committed.pop("README.md")
    assert sorted(made) == sorted(committed)
    assert [n for n in made if made[n] != committed[n]] == []
    # the per-node fixtures of tests/fixtures/ (every deviceinfo-* and nodeinfo-* there) are made by Go too
    made_top = {p.name: p.read_bytes() for p in top.iterdir()}
    per_node = {p.name: p.read_bytes() for p in FIXTURES.parent.glob("*info-*.json")}
    assert sorted(made_top) == sorted(per_node)
    assert [n for n in made_top if made_top[n] != per_node[n]] == []
