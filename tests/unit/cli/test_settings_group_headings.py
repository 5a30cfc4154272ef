"""`fault-agent settings --comments` heads each settings group with the first line of its class docstring
(agent/cli/settings.py render_yaml): every group has one, and config/agent.yaml carries it."""

from __future__ import annotations

from pydantic import BaseModel

from agent.cli.settings import render_yaml
from agent.settings import Settings


def test_every_group_is_headed_by_its_docstring_in_the_commented_yaml() -> None:
    settings = Settings()
    lines = render_yaml(settings, comments=True).splitlines()
    groups = {name: type(v) for name in Settings.model_fields if isinstance(v := getattr(settings, name), BaseModel)}
    assert len(groups) >= 9
    for name, group in groups.items():
        doc = group.__dict__.get("__doc__") or ""
        assert doc.strip(), f"settings group {name} ({group.__name__}) has no docstring"
        heading = doc.strip().splitlines()[0]
        assert heading.endswith("."), f"{group.__name__}: the heading is cut mid-sentence: {heading!r}"
        at = lines.index(f"{name}:")
        assert lines[at - 1] == f"# {heading}", (name, lines[at - 1])
