"""The leader's Lease read raw (issue 39: the V1Lease model and its date parsing were most of the leader's CPU): the
fields it uses, and a clear error for an answer that is not a Lease (the round then counts as not renewed)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from support.fakes import RawAnswer

from agent.kube.errors import KubeApiError
from agent.runtime.leader import _lease_fields, _raw_answer

LEASE = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {"name": "fault-agent", "namespace": "ns", "resourceVersion": "812"},
    "spec": {
        "holderIdentity": "pod-a_1f2e3d",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-12-05T15:00:00.000001Z",
        "renewTime": "2026-12-05T15:00:02.123456Z",
        "leaseTransitions": 3,
    },
}


def test_a_lease_is_read_for_the_fields_the_elector_uses() -> None:
    assert _lease_fields(orjson.dumps(LEASE)) == (
        "pod-a_1f2e3d", "2026-12-05T15:00:02.123456Z", 15.0, 3, "2026-12-05T15:00:00.000001Z", "812",
    )  # fmt: skip


def test_a_released_lease_has_no_holder_and_no_times() -> None:
    """As the elector's release leaves it, or kubectl creates one: absent fields, not errors."""
    bare = {"metadata": {"resourceVersion": "9"}, "spec": {}}
    assert _lease_fields(orjson.dumps(bare)) == ("", "", None, 0, None, "9")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html>", id="not-json"),
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(b'{"metadata":{}}', id="no-spec"),
        pytest.param(orjson.dumps({**LEASE, "spec": {"holderIdentity": 7}}), id="holder-not-text"),
        pytest.param(orjson.dumps({**LEASE, "spec": {"leaseDurationSeconds": "15"}}), id="duration-text"),
        pytest.param(orjson.dumps({**LEASE, "spec": {"acquireTime": 5}}), id="acquire-not-text"),
    ],
)
def test_an_answer_that_is_not_a_lease_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message; the elector logs it
        _lease_fields(body)


def test_a_refused_read_raises_the_typed_error_with_its_status() -> None:
    """404 must come out as a KubeApiError with status 404 (agent.kube.errors): the elector creates the Lease then."""
    resp = RawAnswer({"kind": "Status", "code": 404}, status=404, reason="Not Found")
    with pytest.raises(KubeApiError) as refused:
        asyncio.run(_raw_answer(resp))
    assert refused.value.status == 404
    assert resp.released
    ok = RawAnswer(LEASE)
    assert orjson.loads(asyncio.run(_raw_answer(ok))) == LEASE
    assert ok.released
