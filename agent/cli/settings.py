"""`fault-agent settings`: print the effective settings (defaults < YAML file < environment) as YAML.

``fault-agent settings --defaults --comments > config/agent.yaml`` regenerates the documented default file:
every field with its description, bounds and environment variable as a comment.
Secrets (fields named like ``*password*``, ``*token*``, ``*secret*``) are shown as ``'***'`` when set, unless
``--show-secrets``.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from agent.settings import ENV_PREFIX, Settings, SettingsError, load_settings

REDACTED = "***"
_SECRET_WORDS = ("password", "token", "secret")
_WRAP = 110

HEADER = """\
# fault-agent settings: every setting with its default.
# Precedence: defaults < this file (--config or $FAULT_AGENT_CONFIG) < environment (FAULT_AGENT_*, nested with __).
# Regenerate with: fault-agent settings --defaults --comments > config/agent.yaml
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments and its `func` (see agent.cli)."""
    parser.add_argument(
        "--defaults", action="store_true", help="print the built-in defaults, ignoring the file and environment"
    )
    parser.add_argument("--comments", action="store_true", help="document each setting in a comment")
    parser.add_argument("--show-secrets", action="store_true", help="print passwords and tokens in clear")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the settings; exit code 0, or 2 when they cannot be loaded (message on stderr)."""
    try:
        settings = default_settings() if args.defaults else load_settings(args.config)
    except SettingsError as e:
        print(f"fault-agent settings: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render_yaml(settings, comments=args.comments, show_secrets=args.show_secrets))
    return 0


def default_settings() -> Settings:
    """The built-in defaults, whatever the environment holds.

    ``Settings()`` always reads ``FAULT_AGENT_*`` variables, so the groups (plain models) are built on their
    own and assembled without the environment.
    """
    values: dict[str, Any] = {}
    for name, info in Settings.model_fields.items():
        if info.default_factory is not None:
            values[name] = info.default_factory()  # type: ignore[call-arg]
        else:
            values[name] = info.default
    return Settings.model_construct(**values)


def _is_secret(name: str) -> bool:
    return any(word in name.lower() for word in _SECRET_WORDS)


def _bounds(info: FieldInfo) -> str:
    parts = []
    symbols = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "min length"}
    for meta in info.metadata:
        for attr, sym in symbols.items():
            if isinstance(meta, annotated_types.BaseMetadata) and hasattr(meta, attr):
                parts.append(f"{sym} {getattr(meta, attr)}")
    return ", ".join(parts)


def _comment(info: FieldInfo, env: str, indent: str) -> list[str]:
    text = info.description or ""
    bounds = _bounds(info)
    if bounds:
        text += f" [{bounds}]"
    lines = textwrap.wrap(text, width=_WRAP - len(indent) - 2, break_on_hyphens=False) if text else []
    lines.append(f"env {env}")
    return [f"{indent}# {line}" for line in lines]


def _scalar(key: str, value: Any, indent: str) -> str:
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True)
    dumped = dumped.removesuffix("\n").removesuffix("\n...").strip()
    return f"{indent}{key}: {dumped}"


def render_yaml(settings: Settings, *, comments: bool = False, show_secrets: bool = False) -> str:
    """`settings` as a YAML document loadable by :func:`agent.settings.load_settings`, fields in model order.

    With `comments`, each field is preceded by its description, bounds and environment variable. Secret fields
    that are set are replaced by ``'***'`` unless `show_secrets`.
    """
    out: list[str] = [HEADER] if comments else []
    for name, info in Settings.model_fields.items():
        value = getattr(settings, name)
        if isinstance(value, BaseModel):
            if comments:
                out.append("")
                doc = type(value).__dict__.get("__doc__")
                if doc:
                    out.append(f"# {doc.strip().splitlines()[0]}")
            out.append(f"{name}:")
            for sub_name, sub_info in type(value).model_fields.items():
                sub_value = getattr(value, sub_name)
                if _is_secret(sub_name) and sub_value is not None and not show_secrets:
                    sub_value = REDACTED
                if comments:
                    out.extend(_comment(sub_info, f"{ENV_PREFIX}{name.upper()}__{sub_name.upper()}", "  "))
                out.append(_scalar(sub_name, sub_value, "  "))
        else:
            if comments:
                out.extend(_comment(info, f"{ENV_PREFIX}{name.upper()}", ""))
            out.append(_scalar(name, value, ""))
    return "\n".join(out) + "\n"
