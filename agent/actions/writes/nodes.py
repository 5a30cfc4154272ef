"""The node writes: the quarantine taint (``<policy.taint_key>=<value>:NoSchedule``) and the annotations kept next
to it (the quarantine hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from agent.actions.results import ActionResult, Outcome
from agent.actions.writes.base import AS_MERGE_PATCH, WriterBase, failed
from agent.kube.errors import KubeApiError

log = structlog.get_logger(__name__)


class NodeWrites(WriterBase):
    """The node writes (:class:`WriterBase` for the plumbing)."""

    async def annotate_node(
        self, node: str, annotations: Mapping[str, str | None], *, incident: str = ""
    ) -> ActionResult:
        """Merge `annotations` into the node's metadata; a None value removes that annotation (the quarantine hold
        kept next to the taint). A merge patch: idempotent, other annotations untouched; 404 counts as done."""
        patch = {"metadata": {"annotations": dict(annotations)}}

        async def call() -> Any:
            return await self.core.patch_node(node, patch, **AS_MERGE_PATCH)

        done = "; ".join(
            f"set annotation {k}" if v is not None else f"remove annotation {k}" for k, v in annotations.items()
        )
        result, _ = await self._write("annotate-node", f"Node/{node}", incident, call, done=done, already=(404,))
        return result

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
        """Quarantine `node`: set taint ``<key>=<value>:NoSchedule``, replacing only an older taint with our
        key; other taints are kept. The node's resourceVersion is a precondition (re-read on conflict)."""
        return await self._edit_taints(node, key, value, incident)

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> ActionResult:
        """Remove the taints with our `key` from `node` (only ours, even if set before an agent restart)."""
        return await self._edit_taints(node, key, None, incident)

    async def _edit_taints(self, node: str, key: str, value: str | None, incident: str) -> ActionResult:
        action = "taint" if value is not None else "untaint"
        target = f"Node/{node}"
        for _ in range(5):
            try:
                obj = await self.core.read_node(node)
            except KubeApiError as e:
                return self._taint_refused(action, target, e)
            current = obj.spec.taints or []
            ours = [t for t in current if t.key == key]
            wanted = [{"key": key, "value": value, "effect": "NoSchedule"}] if value is not None else []
            if [(t.value, t.effect) for t in ours] == [(w["value"], w["effect"]) for w in wanted]:
                return ActionResult(action, target, Outcome.ALREADY_DONE, "taints already as wanted")
            taints = [taint_body(t) for t in current if t.key != key] + wanted
            patch = {"metadata": {"resourceVersion": obj.metadata.resource_version}, "spec": {"taints": taints}}

            async def call(patch: dict[str, Any] = patch) -> Any:
                return await self.core.patch_node(node, patch, **AS_MERGE_PATCH)

            done = f"set taint {key}={value}:NoSchedule" if value is not None else f"remove taint {key}"
            if self.dry_run:
                result, _ = await self._write(action, target, incident, call, done=done)
                return result
            try:
                await self._send(action, target, incident, call)
            except KubeApiError as e:
                if e.status == 409:
                    continue  # the node changed under us: re-read and retry
                return self._taint_refused(action, target, e)
            log.info("write done", action=action, target=target, incident=incident, did=done)
            return ActionResult(action, target, Outcome.DONE, done)
        return ActionResult(
            action, target, Outcome.FAILED, "node kept changing (5 conflicts)", retriable=True, status=409
        )

    @staticmethod
    def _taint_refused(action: str, target: str, e: KubeApiError) -> ActionResult:
        """The result of a taint edit the apiserver refused: 404 (the node is gone) is ALREADY_DONE; otherwise
        FAILED, retriable on a 5xx. A connection error is not caught: the caller's pass tries again."""
        if e.status == 404:
            return ActionResult(action, target, Outcome.ALREADY_DONE, "node not found", status=404)
        return failed(action, target, e, retriable=bool(e.status and e.status >= 500))


def taint_body(taint: Any) -> dict[str, Any]:
    """A `V1Taint` as the API spells it, unset fields left out: ``timeAdded``, not the client model's
    ``to_dict()`` key ``time_added``, which the apiserver drops as unknown, so another party's NoExecute taint
    would lose the time its tolerationSeconds count from (and deploy/'s admission policy denies the patch)."""
    body = {"key": taint.key, "value": taint.value, "effect": taint.effect, "timeAdded": taint.time_added}
    return {k: v for k, v in body.items() if v is not None}
