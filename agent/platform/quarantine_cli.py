"""`fault-agent quarantine [list|show NODE|release NODE]`: the nodes the agent quarantines, why, until when, and
an early release once the hardware was replaced or checked.

The agent quarantines a node with the taint ``<policy.taint_key>=<level>:NoSchedule`` (a node fault, or
``detect.isolated_chips_taint`` isolated chips) and keeps a *hold* beside it, the node annotation
``<policy.taint_key>`` = ``{"level", "until", "since"}`` (agent.core.quarantine), so a restarted agent keeps the node
quarantined until then. ``release`` writes the node annotation ``fault-agent.io/quarantine-release`` =
``{"by", "at", "reason"}``: every agent replica ends the isolation of the node's chips isolated before it, the
leader lifts the holds that began before it, removes the taint unless a fault is still reported on the node, and
publishes ``quarantine.released``. The annotation stays on the node as the record of who released it and why.

The person running it needs nodes get/list (list, show) and patch (release): ``deploy/operator-rbac.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from kubernetes_asyncio import client as k8s

from agent.core.quarantine import (
    MAX_RELEASE_REASON,
    RELEASE_ANNOTATION,
    Release,
    encode_release,
    hold_since,
    parse_quarantine_hold,
    parse_release,
)
from agent.kube.errors import KubeApiError, raise_for_answer, translated
from agent.platform.kubeapi import add_login_arguments
from agent.settings import Settings, SettingsError, load_settings

LIST_PAGE = 500


@dataclass(frozen=True, slots=True)
class Quarantined:
    """What the agent's marks on one node say. Times are None when absent; `problems` names marks it could not
    read (shown, never fatal).

    Attributes:
        node: the node's name.
        level: the quarantine taint's value (a fault level name), None when the node has no such taint.
        tainted_at: the taint's ``timeAdded``.
        hold_level, hold_until, hold_since: the hold annotation's fields.
        release: the last person's release written on the node.
    """

    node: str
    level: str | None
    tainted_at: datetime | None
    hold_level: str | None
    hold_until: datetime | None
    hold_since: datetime | None
    release: Release | None
    problems: tuple[str, ...] = ()

    @property
    def quarantined(self) -> bool:
        """Whether the agent keeps the node out of scheduling (a taint or a hold)."""
        return self.level is not None or self.hold_until is not None


def _time(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def read_node(node: dict[str, Any], taint_key: str) -> Quarantined:
    """The agent's quarantine marks on `node` (a Node as the apiserver returns it, JSON). Pure; never raises."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    problems: list[str] = []
    level = tainted_at = None
    for taint in (node.get("spec") or {}).get("taints") or []:
        if isinstance(taint, dict) and taint.get("key") == taint_key:
            level = str(taint.get("value") or "") or None
            tainted_at = _time(taint.get("timeAdded"))
    hold_level = until = since = None
    hold_text = annotations.get(taint_key)
    if hold_text:
        try:
            lvl, until = parse_quarantine_hold(str(hold_text))
            hold_level, since = lvl.wire_name, hold_since(str(hold_text))
        except ValueError as e:
            problems.append(f"hold annotation {taint_key} unreadable: {e}")
    release = None
    release_text = annotations.get(RELEASE_ANNOTATION)
    if release_text:
        try:
            release = parse_release(str(release_text))
        except ValueError as e:
            problems.append(f"release annotation {RELEASE_ANNOTATION} unreadable: {e}")
    return Quarantined(str(meta.get("name", "")), level, tainted_at, hold_level, until, since, release, tuple(problems))


def _show(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def list_lines(nodes: list[Quarantined]) -> list[str]:
    """The ``list`` table: one line per quarantined node, sorted by name."""
    rows = [("NODE", "LEVEL", "TAINTED", "HELD UNTIL", "RELEASED")]
    for q in sorted((q for q in nodes if q.quarantined), key=lambda q: q.node):
        released = f"{_show(q.release.at)} by {q.release.by}" if q.release else "-"
        rows.append((q.node, q.level or q.hold_level or "-", _show(q.tainted_at), _show(q.hold_until), released))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def show_lines(q: Quarantined, now: datetime) -> list[str]:
    """The ``show`` text for one node: its taint, hold and release, and what they mean at `now`."""
    lines = [f"node {q.node}: {'quarantined' if q.quarantined else 'not quarantined by the agent'}"]
    if q.level:
        lines.append(f"  taint: {q.level} (NoSchedule) since {_show(q.tainted_at)}")
    if q.hold_until:
        left = (q.hold_until - now).total_seconds()
        state = f"{left / 3600:.1f} h left" if left > 0 else "ended; the leader lifts it at its next tick"
        lines.append(f"  hold: {q.hold_level} until {_show(q.hold_until)} ({state}), written {_show(q.hold_since)}")
    if q.release:
        lines.append(f"  released: {_show(q.release.at)} by {q.release.by}: {q.release.reason or '(no reason)'}")
    lines += [f"  problem: {p}" for p in q.problems]
    if q.quarantined:
        lines.append(
            "  why: the agent's log and its fault.detected events for this node say which fault; "
            "`fault-agent quarantine release` lifts the hold and isolated chips (a fault still reported keeps it)"
        )
    return lines


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")


def _reason(text: str) -> str:
    text = text.strip()
    if not text:
        raise argparse.ArgumentTypeError("needs a reason: why the node is released is recorded")
    if not text.isprintable():
        raise argparse.ArgumentTypeError(f"{text!r} holds control characters")
    if len(text) > MAX_RELEASE_REASON:
        raise argparse.ArgumentTypeError(f"at most {MAX_RELEASE_REASON} characters, got {len(text)}")
    return text


def _who(text: str) -> str:
    name = text.strip()
    if not name or not name.isprintable() or len(name) > 253:
        raise argparse.ArgumentTypeError("a printable name of 1 to 253 characters")
    return name


async def _json(resp: Any) -> dict[str, Any]:
    """The JSON body of a ``_preload_content=False`` answer (an aiohttp response), its connection released.

    Raises:
        KubeApiError: the status is not 2xx (the raw answer does not raise it by itself).
    """
    try:
        body = await resp.read()
    finally:
        resp.release()
    raise_for_answer(resp.status, resp.reason, body, resp.headers)
    doc: dict[str, Any] = orjson.loads(body)
    return doc


async def _nodes(core: k8s.CoreV1Api) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cont: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": LIST_PAGE, "_preload_content": False}
        if cont:
            kwargs["_continue"] = cont
        page = await _json(await core.list_node(**kwargs))
        out += page.get("items") or []
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return out


async def _node(core: k8s.CoreV1Api, name: str) -> dict[str, Any]:
    return await _json(await core.read_node(name, _preload_content=False))


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    from agent.kube.client import new_api_client
    from agent.platform.kubeapi import login

    key = settings.policy.taint_key
    api = await new_api_client(*login(args, settings))
    try:
        with translated():  # a connection error reaches main() as a KubeConnectionError
            core = k8s.CoreV1Api(api)
            if args.action == "list":
                nodes = [read_node(n, key) for n in await _nodes(core)]
                quarantined = [q for q in nodes if q.quarantined]
                if not quarantined:
                    print(f"no node is quarantined by the agent (taint or hold {key}; {len(nodes)} nodes)")
                    return 0
                print("\n".join(list_lines(quarantined)))
                return 0
            q = read_node(await _node(core, args.node), key)
            if args.action == "show":
                print("\n".join(show_lines(q, datetime.now(UTC))))
                return 0
            if not q.quarantined:
                print(f"fault-agent quarantine: node {args.node} is not quarantined by the agent; nothing released",
                      file=sys.stderr)  # fmt: skip
                return 1
            release = Release(args.by or _user(), datetime.now(UTC), args.reason)
            body = {"metadata": {"annotations": {RELEASE_ANNOTATION: encode_release(release)}}}
            merge: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
            await core.patch_node(args.node, body, **merge)
            print(
                f"node {args.node} released by {release.by} at {_show(release.at)}: the leading agent lifts its hold "
                "and the isolation of chips isolated before now, removes the taint unless a fault is still reported "
                "there, and publishes quarantine.released"
            )
            return 0
    except KubeApiError as e:
        where = f"node {args.node}" if getattr(args, "node", None) else "nodes"
        if e.status == 404:
            print(f"fault-agent quarantine: {where} not found", file=sys.stderr)
        else:
            detail = f": {e.server_message}" if e.server_message else ""
            print(f"fault-agent quarantine: cannot {args.action} {where}: HTTP {e.status} {e.reason}{detail}",
                  file=sys.stderr)  # fmt: skip
        return 1
    finally:
        await api.close()


def main(args: argparse.Namespace) -> int:
    """Run `quarantine list|show|release`. Exit codes: 0 done, 1 an apiserver error or nothing to release, 2 bad
    settings."""
    from agent.kube.errors import KubeError

    try:
        settings = load_settings(getattr(args, "config", None))
    except SettingsError as e:
        print(f"fault-agent quarantine: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args, settings))
    except KubeError as e:
        print(f"fault-agent quarantine: {e}", file=sys.stderr)
        return 1


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `quarantine`'s actions (``list`` default, ``show NODE``, ``release NODE --reason TEXT [--by NAME]``)."""
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="the quarantined nodes: level, since, held until, released")
    show = actions.add_parser("show", help="one node's taint, hold and release, and what they mean now")
    show.add_argument("node")
    release = actions.add_parser("release", help="release a node early (hardware replaced or checked)")
    release.add_argument("node")
    release.add_argument("--reason", type=_reason, required=True, help="why: recorded on the node and in the event")
    release.add_argument("--by", type=_who, help="who releases it (default: the login name)")
    for sub in (parser, *actions.choices.values()):  # before or after the action, as --config
        add_login_arguments(sub, suppress=sub is not parser)
    parser.set_defaults(func=main, action="list")
