"""Write the agent's settings schema into the chart's values.schema.json (``make chart-files``).

The chart renders ``settings`` into the agent's agent.yaml, which the agent validates at start
(:class:`agent.settings.Settings`); this puts the same rules under ``properties.settings`` of
deploy/chart/values.schema.json so that ``helm install/template`` refuses a misspelt, ill-typed or out-of-range
setting instead of installing pods that stop at start. The schema is pydantic's
(``Settings.model_json_schema()``) adapted to the JSON Schema draft-07 that Helm reads: ``$ref`` to ``$defs``
inlined, titles dropped, and no ``required`` (``settings`` holds only what differs from the defaults). Types,
enums, ``minimum``/``maximum``, lengths and ``additionalProperties: false`` stay. Checks the model makes in
validators (e.g. Kubernetes name syntax) are not in the schema; the chart's templates and the agent keep them.

Usage: ``python -m testbed.tools.gen_chart_schema [--check]``; ``--check`` exits 1 when the committed file is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent.settings import Settings

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "deploy" / "chart" / "values.schema.json"
SETTINGS_DESCRIPTION = (
    "The agent's settings as in config/agent.yaml, all optional (generated from agent.settings.Settings by "
    "`make chart-files`; do not edit by hand)."
)
_DROPPED = frozenset({"title", "required"})


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """A copy of ``node`` with every ``{"$ref": "#/$defs/X"}`` replaced by X (recursively) and titles and
    ``required`` dropped. Raises ValueError on a ``$ref`` elsewhere (pydantic emits none for this model)."""
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        prefix = "#/$defs/"
        if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
            raise ValueError(f"unsupported $ref {ref!r} in the settings schema")
        target = _inline(defs[ref[len(prefix) :]], defs)
        rest = {k: _inline(v, defs) for k, v in node.items() if k != "$ref" and k not in _DROPPED}
        return {**target, **rest}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        elif key not in _DROPPED and key != "$defs":
            out[key] = _inline(value, defs)
    return out


def settings_schema() -> dict[str, Any]:
    """The draft-07 schema of the chart's ``settings`` value: an object whose keys are the agent's setting
    groups and top-level settings, every one optional, unknown keys refused."""
    raw = Settings.model_json_schema()
    schema: dict[str, Any] = _inline(raw, raw.get("$defs", {}))
    schema["description"] = SETTINGS_DESCRIPTION
    return schema


def render(current: str) -> str:
    """``current`` (the text of values.schema.json) with ``properties.settings`` replaced by
    :func:`settings_schema`; the other values' schemas are kept as they are. Output: 2-space JSON plus a newline."""
    values_schema = json.loads(current)
    values_schema["properties"]["settings"] = settings_schema()
    return json.dumps(values_schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite deploy/chart/values.schema.json; with ``--check`` only compare and return 1 when it differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed schema is stale")
    args = parser.parse_args(argv)
    current = SCHEMA_PATH.read_text()
    wanted = render(current)
    if args.check:
        if current != wanted:
            print(f"{SCHEMA_PATH} is stale: run `make chart-files`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        SCHEMA_PATH.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
