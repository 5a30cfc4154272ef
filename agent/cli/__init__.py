"""`fault-agent` command line: one entry point, subcommands implemented in their own modules.

Each subcommand module exposes ``configure(parser: argparse.ArgumentParser) -> None``, which adds its
arguments and sets ``parser.set_defaults(func=...)`` to a callable ``func(args) -> int`` (the exit code).
Only the chosen subcommand's module is imported, so ``fault-agent lint`` does not load the Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from agent.platform.output import output_closed

# name -> (module, one-line help). Modules are imported lazily.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("agent.runtime.app", "run the agent (watch, detect, decide, act, publish)"),
    "events": ("agent.sinks.tail", "read the agent's events from Kafka ('events tail')"),
    "lint": ("agent.platform.lint", "check fault-tolerant job files for mistakes"),
    "submit": ("agent.platform.submit", "create a job's rings-config ConfigMap and the job"),
    "status": ("agent.platform.status", "show jobs, incidents, budgets, breaker and leader state"),
    "goodput": ("agent.platform.goodput_cli", "effective training time per job from the events topic"),
    "breaker": ("agent.cli.breaker", "show or reset the restart circuit breaker"),
    "quarantine": ("agent.platform.quarantine_cli", "list quarantined nodes, show one, release one early"),
    "settings": ("agent.cli.settings", "print the effective settings (defaults, file, environment)"),
    "replay": ("agent.platform.replay_cli", "replay a recording or scenario; compare two configurations"),
    "detect": ("agent.platform.detect_cli", "show what the agent makes of ConfigMaps or Nodes (faults, rejections)"),
}


def build_parser(chosen: str | None) -> argparse.ArgumentParser:
    """The top-level parser; only `chosen`'s module is imported and configured.

    Raises:
        ModuleNotFoundError: the chosen subcommand's module is missing (a packaging bug).
    """
    parser = argparse.ArgumentParser(
        prog="fault-agent",
        description="Fault monitor and recovery agent for resumable distributed training on Kubernetes.",
    )
    parser.add_argument("--config", help="YAML settings file (default: $FAULT_AGENT_CONFIG)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            configure: Callable[[argparse.ArgumentParser], None] = importlib.import_module(module).configure
            configure(p)
            _accept_config(p)
    return parser


def _accept_config(parser: argparse.ArgumentParser) -> None:
    """Let `parser` (a subcommand's) take ``--config`` after the subcommand too, without its default overwriting
    one given before it: ``fault-agent --config X replay`` and ``fault-agent replay --config X`` are the same,
    and when both are given the one after the subcommand wins (argparse applies a subparser's defaults over the
    top-level namespace, so the subcommand's option gets no default)."""
    for action in parser._actions:  # argparse has no public lookup by option string
        if "--config" in action.option_strings:
            action.default = argparse.SUPPRESS
            return
    parser.add_argument(
        "--config", default=argparse.SUPPRESS, help="YAML settings file (the same as --config before the subcommand)"
    )


def _chosen(argv: Sequence[str]) -> str | None:
    skip_next = False
    for arg in argv:
        if skip_next:
            skip_next = False
            continue
        if arg == "--config":
            skip_next = True
            continue
        if arg.startswith("-"):
            continue
        return arg if arg in SUBCOMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default sys.argv[1:]) and run the subcommand; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen(args_list))
    args = parser.parse_args(args_list)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return func(args)
    except BrokenPipeError:  # `fault-agent … | head`: the reader left; stop quietly, as Unix tools do
        return output_closed()
    except RecursionError:  # a backstop (e.g. a settings file of [[[…]]]): our own readers refuse deep nesting first
        print(
            f"fault-agent {args.command}: stopped at Python's recursion limit: an input nested too deep (a settings "
            "file?), or a bug",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
