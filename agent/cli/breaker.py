"""`fault-agent breaker [show|reset]`: read or reset the restart circuit breaker.

The agent keeps the breaker's state in the ConfigMap ``policy.breaker_configmap`` (default
``fault-agent-breaker``) in ``leader.namespace``: data ``state`` (``open``/``closed``), and for an open breaker
``tripped_at``, ``faulty_nodes``, ``watched_nodes``, ``reason`` (see agent.core.guards.CircuitBreaker.to_data).
``reset`` writes ``state: closed`` with ``reset_at`` and ``reset_by``; every agent replica reads the ConfigMap
every few seconds and closes its breaker when it sees that.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

from kubernetes_asyncio import client as k8s

from agent.actions.breaker_store import read_breaker_state, reset_breaker
from agent.kube.client import namespace_missing
from agent.kube.errors import KubeApiError, translated
from agent.settings import Settings, SettingsError, load_settings


def show_time(value: str) -> str:
    """A breaker time as ISO 8601 UTC (``2026-01-01T12:00:00Z``): ``tripped_at`` is written as epoch seconds,
    ``reset_at`` as RFC 3339. A value that is neither is returned as written."""
    try:
        when = datetime.fromtimestamp(float(value), UTC)
    except (ValueError, OverflowError, OSError):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        if when.tzinfo is None:
            return value
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def show_lines(data: Mapping[str, str] | None, where: str) -> list[str]:
    """What ``breaker show`` prints for the breaker ConfigMap's `data` (None: there is none) at `where`
    (``namespace/name``): first the line ``fault-agent status`` prints for the same state, word for word
    (agent.platform.status.render ``breaker_line``), then each key of the ConfigMap, times as ISO 8601 UTC. Pure."""
    from agent.platform.status.render import breaker_line, state_line

    lines = [state_line("breaker", breaker_line(data, where))]
    for key in sorted(k for k in data or {} if k != "state"):
        value = (data or {})[key]
        lines.append(f"  {key}: {show_time(value) if key.endswith('_at') else value}")
    return lines


def describe_missing_namespace(settings: Settings, action: str) -> str:
    """The message for a breaker ConfigMap whose namespace does not exist, naming the settings to fix."""
    name, ns = settings.policy.breaker_configmap, settings.leader.namespace
    verb = "read" if action == "show" else "written"
    return (
        f"cannot {action} the breaker: ConfigMap {name} cannot be {verb} because namespace {ns} does not "
        f"exist. The namespace is the setting leader.namespace (FAULT_AGENT_LEADER__NAMESPACE) and the "
        f"ConfigMap policy.breaker_configmap (FAULT_AGENT_POLICY__BREAKER_CONFIGMAP): set them (--config or "
        f"environment) to where the agent runs"
    )


def describe_error(e: KubeApiError, settings: Settings, action: str) -> str:
    """What went wrong, for the person at the terminal; a 404 names the ConfigMap, namespace and settings."""
    name, ns = settings.policy.breaker_configmap, settings.leader.namespace
    if e.status == 404:
        return describe_missing_namespace(settings, action)
    message = e.server_message
    return (
        f"cannot {action} the breaker (ConfigMap {ns}/{name}): the apiserver answered HTTP {e.status}: {e.reason}"
        + (f" ({message})" if message else "")
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    from agent.kube.client import new_api_client
    from agent.platform.kubeapi import login

    api = await new_api_client(*login(args, settings))
    try:
        core = k8s.CoreV1Api(api)
        where = f"ConfigMap {settings.leader.namespace}/{settings.policy.breaker_configmap}"
        if args.action == "reset":
            before = await reset_breaker(
                core, settings, by=args.by or _user(), now=datetime.now(UTC), reason=args.reason or ""
            )
            print(f"breaker reset ({where}); it was {before.get('state', 'closed')}")
            if before.get("reason"):
                print(f"  it had tripped because: {before['reason']}")
            return 0
        data = await read_breaker_state(core, settings)
        with translated():  # namespace_missing reads with the generated client itself
            missing = data is None and await namespace_missing(core, settings.leader.namespace)
        if missing:
            # not "closed": nothing is known about a breaker in a namespace that does not exist
            print(f"fault-agent breaker: {describe_missing_namespace(settings, 'show')}", file=sys.stderr)
            return 1
        print("\n".join(show_lines(data, f"{settings.leader.namespace}/{settings.policy.breaker_configmap}")))
        return 1 if data is not None and data.get("state") == "open" else 0
    except KubeApiError as e:
        print(f"fault-agent breaker: {describe_error(e, settings, args.action)}", file=sys.stderr)
        return 1
    finally:
        await api.close()


def main(args: argparse.Namespace) -> int:
    """Run `breaker show|reset`. Exit codes: 0 closed / reset done, 1 open or an apiserver error, 2 bad settings."""
    from agent.kube.errors import KubeError

    try:
        settings = load_settings(getattr(args, "config", None))
    except SettingsError as e:
        print(f"fault-agent breaker: {e}")
        return 2
    try:
        return asyncio.run(_run(args, settings))
    except KubeError as e:
        print(f"fault-agent breaker: {e}")
        return 1


MAX_BY_LENGTH = 253
"""The longest ``--by`` name kept (a Kubernetes user or ServiceAccount name fits)."""


def who(value: str) -> str:
    """The ``--by`` argument: who resets the breaker, as recorded in its ConfigMap (``reset_by``). Raises
    argparse.ArgumentTypeError for a blank name (it would record nobody), control characters or a name longer
    than :data:`MAX_BY_LENGTH`."""
    name = value.strip()
    if not name:
        raise argparse.ArgumentTypeError("needs a name: who resets the breaker is recorded (omit --by for the login)")
    if len(name) > MAX_BY_LENGTH:
        raise argparse.ArgumentTypeError(f"at most {MAX_BY_LENGTH} characters, got {len(name)}")
    if not name.isprintable():
        raise argparse.ArgumentTypeError(f"{name!r} holds control characters")
    return name


def reason_text(text: str) -> str:
    """The ``--reason`` argument: printable text of at most 256 characters. Raises ArgumentTypeError otherwise."""
    text = text.strip()
    if not text.isprintable():
        raise argparse.ArgumentTypeError(f"{text!r} holds control characters")
    if len(text) > 256:
        raise argparse.ArgumentTypeError(f"at most 256 characters, got {len(text)}")
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `breaker`'s arguments (``show`` default, ``reset [--by NAME] [--reason TEXT]``) and set its function."""
    parser.add_argument("action", nargs="?", choices=["show", "reset"], default="show", help="show (default) or reset")
    parser.add_argument("--by", type=who, help="who resets it, recorded in the ConfigMap (default: the login name)")
    parser.add_argument(
        "--reason",
        type=reason_text,
        help="why, recorded in the ConfigMap and in the breaker.reset event the leading agent publishes",
    )
    from agent.platform.kubeapi import add_login_arguments

    add_login_arguments(parser)
    parser.set_defaults(func=main)
