"""The fail-closed check's reading of the probe's answers (agent.sources.admission_check), without an apiserver:
the answers' bodies are Status objects as the apiserver sends them (tests/integration/test_fail_closed.py reads the
same answers from the real one)."""

from __future__ import annotations

import json

import pytest

from agent.sources.admission_check import AdmissionCheck, Verdict, verdict

VAP_DENIED = (
    "configmaps \"fault-agent-admission-probe\" is forbidden: ValidatingAdmissionPolicy 'fault-agent-writes' with "
    "binding 'fault-agent-writes' denied request: fault-agent policy, rule configmaps: CREATE configmaps "
    "fault-agent/fault-agent-admission-probe denied; ..."
)
OTHER_VAP = (
    "configmaps \"fault-agent-admission-probe\" is forbidden: ValidatingAdmissionPolicy 'site-policy' with "
    "binding 'site-policy' denied request: no ConfigMaps here"
)
RBAC_DENIED = (
    'configmaps is forbidden: User "system:serviceaccount:fa:fault-agent" cannot create resource "configmaps" '
    'in API group "" in the namespace "default"'
)


def _status(code: int, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                       "code": code}).encode()  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "in_force", "answered", "says"),
    [
        (403, _status(403, VAP_DENIED), True, True, "denied the probe"),
        (201, None, False, True, "was admitted"),
        (409, _status(409, 'configmaps "fault-agent-admission-probe" already exists'), False, True, "reached storage"),
        (403, _status(403, OTHER_VAP), False, True, "before the admission policy"),
        (403, _status(403, RBAC_DENIED), False, True, "before the admission policy"),
        (403, "not json", False, True, "not json"),
        (422, _status(422, "invalid"), False, True, "HTTP 422"),
        (500, _status(500, "etcd"), False, False, "did not answer"),
        (429, _status(429, "slow down"), False, False, "did not answer"),
    ],
)
def test_verdict(status: int, body: object, in_force: bool, answered: bool, says: str) -> None:
    v = verdict(status, body)
    assert (v.in_force, v.answered) == (in_force, answered)
    assert says in v.detail


class Gauge:
    def __init__(self) -> None:
        self.values: list[tuple[bool, str]] = []

    def admission_policy_in_force(self, in_force: bool, check: str) -> None:
        self.values.append((in_force, check))


def test_refuse_until_denied_and_an_unanswered_probe_keeps_the_last_verdict() -> None:
    gauge = Gauge()
    check = AdmissionCheck("fa", "refuse", gauge)
    assert check.refusal() is not None  # nothing answered yet: fail closed
    assert gauge.values == [(False, "refuse")]
    check.seen(verdict(403, _status(403, VAP_DENIED)))
    assert check.refusal() is None
    check.seen(Verdict(False, "no answer", answered=False))  # an apiserver hiccup: still in force
    assert check.refusal() is None
    check.seen(verdict(201, None))
    refusal = check.refusal()
    assert refusal is not None
    assert "was admitted" in refusal
    assert gauge.values[-1] == (False, "refuse")
    check.seen(Verdict(False, "no answer", answered=False))  # and still not in force
    assert check.refusal() == refusal


def test_warn_reports_but_never_refuses() -> None:
    gauge = Gauge()
    check = AdmissionCheck("fa", "warn", gauge)
    check.seen(verdict(201, None))
    assert check.refusal() is None
    assert not check.in_force
    assert gauge.values[-1] == (False, "warn")
