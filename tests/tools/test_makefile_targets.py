"""What the Makefile's testbed targets run (issue 41, 8: `make testbed-up` depended on `setup`, which installs
promtool, the prometheus server and faketime for the tests, none of which the testbed uses). Read with `make -n`,
which prints each command a target would run, without running one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_TOOLS = ("apt-get", "promtool", "prometheus", "faketime", "kubectl")


def planned(*targets: str, makefile: Path = REPO / "Makefile") -> list[str]:
    """The commands `make -n` lists for `targets`, run in the repository (a throwaway testbed folder)."""
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    res = subprocess.run(
        [make, "-n", "-f", str(makefile), *targets, "TESTBED_DIR=/nonexistent/tb"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


@pytest.mark.parametrize("target", ["testbed-up", "testbed-down", "demo"])
def test_testbed_targets_install_no_test_tools(target: str) -> None:
    commands = planned(target)
    assert [c for c in commands if any(tool in c for tool in TEST_TOOLS)] == []
    assert any(" -m testbed" in c for c in commands), commands


def test_the_check_sees_the_old_dependency(tmp_path: Path) -> None:
    """The same check on the Makefile before the fix (testbed-up: setup) finds the test tools."""
    old = (REPO / "Makefile").read_text().replace("testbed-up: $(STAMP)\n", "testbed-up: setup\n")
    assert old != (REPO / "Makefile").read_text()
    path = tmp_path / "Makefile"
    path.write_text(old)
    assert any("apt-get" in c for c in planned("testbed-up", makefile=path))
