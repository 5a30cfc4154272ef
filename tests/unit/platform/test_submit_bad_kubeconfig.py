"""`submit` with a kubeconfig that is not text fails with one error line, like `status` (no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import main
from agent.platform.kubeapi import context_namespace

EXAMPLE = Path(__file__).resolve().parents[3] / "config" / "examples" / "vcjob-grace.yaml"


def _junk(tmp_path: Path) -> Path:
    path = tmp_path / "junk.bin"
    path.write_bytes(bytes([0xFF, 0xFE, 0x00, 0x9C, 0x81, 0xC3, 0x28]) * 40)
    return path


def test_context_namespace_of_binary_kubeconfig_is_default(tmp_path: Path) -> None:
    assert context_namespace(str(_junk(tmp_path)), None) == "default"


@pytest.mark.parametrize("command", [["submit", "-f", str(EXAMPLE), "--dry-run"], ["status", "some-job"]])
def test_binary_kubeconfig_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    junk = _junk(tmp_path)
    code = main([*command, "--kubeconfig", str(junk)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1, err
    assert err.startswith("error: ")
    assert str(junk) in err
