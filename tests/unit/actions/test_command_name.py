"""The RestartJob Command's name derives from the incident: the same incident always names the same Command."""

from __future__ import annotations

import re

from agent.actions.writer import command_name

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def test_same_incident_same_name_other_incident_other_name() -> None:
    a = command_name("llama", "vc-0123456789")
    assert a == command_name("llama", "vc-0123456789")
    assert a != command_name("llama", "vc-9876543210")
    assert re.fullmatch(r"llama-restartjob-[0-9a-f]{10}", a)


def test_long_job_names_are_cut_to_a_valid_name() -> None:
    for job in ("j" * 253, "a" * 240 + "-" + "b" * 12, "x" * 241 + "-."):
        name = command_name(job, "inc")
        assert len(name) <= 253
        assert DNS_SUBDOMAIN.match(name), name
        assert name.endswith(command_name("j", "inc").removeprefix("j"))
