"""The committed MindCluster-format fixtures are exactly what the Go generator (testbed/mcencode) writes: a
fixture edited by hand, or a generator change not re-run, fails here. Needs only the Go toolchain."""

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
    subprocess.run([go, "run", ".", "fixtures", "-out", str(tmp_path)], cwd=GENERATOR, env=env, check=True, timeout=300)
    made = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in FIXTURES.iterdir() if not p.name.startswith("docs-")}
    committed.pop("README.md")
    assert sorted(made) == sorted(committed)
    assert [n for n in made if made[n] != committed[n]] == []
