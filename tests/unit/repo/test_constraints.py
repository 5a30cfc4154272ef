"""constraints.txt (written by `make lock`) pins every dependency pyproject.toml names, inside its range, and the
Dockerfile and the Makefile install with it; the production image gets no testbed package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[3]


def _pins(text: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9._-]+)==([^\s;]+)", line)
        if m:
            name = canonicalize_name(m.group(1))
            assert name not in pins, f"{name} pinned twice"
            pins[name] = m.group(2)
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return [Requirement(r) for r in reqs]


def test_every_requirement_is_pinned_inside_its_range() -> None:
    pins = _pins((REPO / "constraints.txt").read_text())
    wrong = {}
    for req in _requirements():
        pin = pins.get(canonicalize_name(req.name))
        if pin is None or not req.specifier.contains(pin, prereleases=True):
            wrong[req.name] = (str(req.specifier), pin)
    assert wrong == {}, "pyproject.toml and constraints.txt disagree: run `make lock`"
    assert "fault-agent" not in pins  # a constraints file cannot pin the project being installed


def test_constraints_name_the_command_that_refreshes_them() -> None:
    head = (REPO / "constraints.txt").read_text().splitlines()[:3]
    assert any(line.strip() == "#    make lock" for line in head), head
    assert re.search(r"^lock:", (REPO / "Makefile").read_text(), flags=re.MULTILINE)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("aiohttp==3.14.5\naiohttp==3.14.6\n", "pinned twice", id="twice"),
    ],
)
def test_pins_reader_rejects(text: str, problem: str) -> None:
    with pytest.raises(AssertionError, match=problem):
        _pins(text)


def test_pins_reader_reads_markers_and_comments() -> None:
    text = "# header\ncolorama==0.4.6 ; sys_platform == 'win32'\n    # via pytest\nPyYAML==6.0.3\n"
    assert _pins(text) == {"colorama": "0.4.6", "pyyaml": "6.0.3"}


def test_setup_and_image_install_with_the_constraints() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "pip install --quiet -c constraints.txt -e '.[dev]'" in makefile
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"pip install .*-c constraints\.txt \.", dockerfile)
    assert "COPY constraints.txt" in dockerfile
    # only agent/ goes into the image's wheel: the testbed package is for tests, demos and benchmarks
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, flags=re.MULTILINE)
    assert not [c for c in copied if "testbed" in c], copied
