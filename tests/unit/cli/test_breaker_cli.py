"""`fault-agent breaker`: times shown as ISO 8601 UTC and readable apiserver errors (no cluster needed)."""

from __future__ import annotations

import argparse
import json

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from agent.cli.breaker import configure, describe_error, show_time
from agent.kube.errors import KubeApiError
from agent.kube.errors import from_api_exception as kube_error
from agent.settings import Settings


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param("1767268800.25", "2026-01-01T12:00:00Z", id="epoch-float-tripped_at"),
        pytest.param("1767268800", "2026-01-01T12:00:00Z", id="epoch-int"),
        pytest.param("2026-01-01T12:00:00.123456+00:00", "2026-01-01T12:00:00Z", id="isoformat-reset_at"),
        pytest.param("2026-01-01T14:00:00+02:00", "2026-01-01T12:00:00Z", id="other-offset"),
        pytest.param("2026-01-01T12:00:00Z", "2026-01-01T12:00:00Z", id="zulu"),
        pytest.param("2026-01-01T12:00:00", "2026-01-01T12:00:00", id="naive-kept"),
        pytest.param("yesterday", "yesterday", id="unreadable-kept"),
        pytest.param("1e400", "1e400", id="overflow-kept"),
    ],
)
def test_show_time(value: str, shown: str) -> None:
    assert show_time(value) == shown


def _typed(e: ApiException) -> KubeApiError:
    """`e` as the writer's edge translates it (agent.kube.errors.from_api_exception)."""
    typed = kube_error(e)
    assert isinstance(typed, KubeApiError)
    return typed


def test_not_found_names_the_config_map_namespace_and_settings() -> None:
    settings = Settings.model_validate({"leader": {"namespace": "nosuch"}})
    text = describe_error(_typed(ApiException(status=404, reason="Not Found")), settings, "reset")
    assert "ConfigMap fault-agent-breaker" in text
    assert "namespace nosuch does not exist" in text
    assert "leader.namespace (FAULT_AGENT_LEADER__NAMESPACE)" in text
    assert "policy.breaker_configmap" in text


def test_other_errors_name_the_config_map_and_status() -> None:
    settings = Settings.model_validate({"leader": {"namespace": "ops"}})
    text = describe_error(_typed(ApiException(status=403, reason="Forbidden")), settings, "show")
    assert (
        text
        == "cannot show the breaker (ConfigMap ops/fault-agent-breaker): the apiserver answered HTTP 403: Forbidden"
    )


def test_a_refusal_carries_the_apiservers_message() -> None:
    """The Status message names who was refused what (RBAC) or the rule that denied (the admission policy); the
    reason phrase alone ("Forbidden") did not say which."""
    settings = Settings.model_validate({"leader": {"namespace": "ops"}})
    message = (
        'configmaps "fault-agent-breaker" is forbidden: User "system:serviceaccount:ops:nobody" cannot update '
        'resource "configmaps" in API group "" in the namespace "ops"'
    )
    refused = ApiException(status=403, reason="Forbidden")
    refused.body = json.dumps({"kind": "Status", "message": message, "reason": "Forbidden", "code": 403}).encode()
    assert describe_error(_typed(refused), settings, "reset").endswith(f"HTTP 403: Forbidden ({message})")
    garbled = ApiException(status=500, reason="Internal Server Error")
    garbled.body = b"<html>oops</html>"
    assert describe_error(_typed(garbled), settings, "reset").endswith("HTTP 500: Internal Server Error")


@pytest.mark.parametrize(
    ("argv", "by"),
    [
        pytest.param(["reset", "--by", "alice"], "alice", id="a-name"),
        pytest.param(["reset", "--by", "  ops@example.com "], "ops@example.com", id="trimmed"),
        pytest.param(["reset"], None, id="omitted: the login name"),
    ],
)
def test_by_names_who_resets(argv: list[str], by: str | None) -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    assert parser.parse_args(argv).by == by


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param("", "needs a name", id="empty"),
        pytest.param("   ", "needs a name", id="blank"),
        pytest.param("a\nb", "control characters", id="newline"),
        pytest.param("x" * 254, "at most 253", id="too-long"),
    ],
)
def test_a_blank_or_unprintable_by_is_refused(value: str, fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, an empty --by was replaced by the login name without a word, and a blank one was recorded."""
    parser = argparse.ArgumentParser()
    configure(parser)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["reset", "--by", value])
    assert exit_.value.code == 2
    assert fragment in capsys.readouterr().err
