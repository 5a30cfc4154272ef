"""`python -m testbed --help` describes every command (issue 41, 8: build, down, status, env and up had none)."""

from __future__ import annotations

import argparse

import pytest

from testbed.__main__ import main


def test_every_testbed_command_has_a_description(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[argparse._SubParsersAction[argparse.ArgumentParser]] = []
    real = argparse.ArgumentParser.add_subparsers

    def spy(self: argparse.ArgumentParser, **kw: object) -> argparse._SubParsersAction[argparse.ArgumentParser]:
        action = real(self, **kw)  # type: ignore[arg-type]
        seen.append(action)
        return action

    monkeypatch.setattr(argparse.ArgumentParser, "add_subparsers", spy)
    with pytest.raises(SystemExit):
        main(["--help"])
    commands = seen[0]
    described = {a.dest: a.help for a in commands._choices_actions}
    assert set(described) == set(commands.choices), (
        f"commands without a description: {set(commands.choices) - set(described)}"
    )
    assert all(text for text in described.values())
