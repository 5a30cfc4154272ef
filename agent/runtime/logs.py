"""Logging: structlog, one JSON object per line in a container, readable key-value lines on a terminal.

Call :func:`configure_logging` once at start (``fault-agent run`` does). Modules log with
``structlog.get_logger(__name__)`` and bind what a reader needs to follow one story: the incident id, the job
(``namespace/name``) and the node, via :func:`bound` (a context manager over contextvars, so everything logged
inside — also from awaited calls — carries them).

The agent's own lines go from structlog straight to the stream (a filtering bound logger and a write logger: about
11 µs a line, against about 31 through the standard library's records and handler, measured on a quiet CPU; the
recovery loop logs on its decision path, issue 39). Standard-library loggers (aiohttp, aiokafka, kubernetes_asyncio)
are rendered by the same processors through a handler on the same stream, so the output stays one format; they are
held at WARNING unless the level is debug.

JSON line shape: ``{"event": "...", "level": "info", "timestamp": "2025-01-01T00:00:00.000000Z", "logger": ...,
<bound and call keys>}``; exceptions add ``"exception"`` with the formatted traceback.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import orjson
import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from agent.settings import LogSettings

#: Libraries that are chatty at INFO; kept at WARNING unless the agent runs at debug level.
NOISY_LIBRARIES = ("aiohttp.access", "aiokafka", "kubernetes_asyncio", "asyncio")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_HANDLER_MARK = "_fault_agent_handler"


def _json_dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


class _NamedWriteLogger(structlog.WriteLogger):
    """structlog's write logger with the name it was asked for (``logger`` in each line, as a standard-library
    logger's name)."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name

    def msg(self, message: str) -> None:
        """Write `message` as one line; a stream that is closed or broken loses the line, as the standard library's
        handlers do, and never fails the caller (no log line is worth stopping recovery for)."""
        with contextlib.suppress(OSError, ValueError):  # ValueError: I/O operation on a closed file
            super().msg(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _NamedWriteLoggerFactory:
    def __init__(self, file: TextIO) -> None:
        self.file = file

    def __call__(self, *args: Any) -> _NamedWriteLogger:
        return _NamedWriteLogger(self.file, str(args[0]) if args else "root")


def _drop_color_message(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    event_dict.pop("color_message", None)  # uvicorn-style duplicate some libraries add
    return event_dict


def wants_json(settings: LogSettings, stream: TextIO) -> bool:
    """True when the output should be JSON: format 'json', or 'auto' and `stream` is not a terminal."""
    if settings.format == "json":
        return True
    if settings.format == "console":
        return False
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


def configure_logging(settings: LogSettings, stream: TextIO | None = None) -> None:
    """Configure structlog and the standard-library root logger to write to `stream` (default stderr).

    Replaces any configuration a previous call made (tests call it repeatedly). Level and format come from
    `settings` (see :class:`agent.settings.LogSettings`).
    """
    out = stream if stream is not None else sys.stderr
    level = _LEVELS[settings.level]
    as_json = wants_json(settings, out)

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _drop_color_message,
    ]
    renderer: Processor
    if as_json:
        # a plain traceback string: dict_tracebacks would also dump frame locals (settings, tokens)
        shared += [structlog.processors.format_exc_info]
        renderer = structlog.processors.JSONRenderer(serializer=_json_dumps)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=bool(getattr(out, "isatty", lambda: False)()))

    structlog.configure(
        processors=[*shared, structlog.processors.StackInfoRenderer(), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_NamedWriteLoggerFactory(out),
        cache_logger_on_first_use=False,  # tests configure again, and capture
    )

    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)

    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in NOISY_LIBRARIES:
        logging.getLogger(name).setLevel(level if level == logging.DEBUG else max(level, logging.WARNING))


@contextlib.contextmanager
def bound(
    *, incident: str | None = None, job: str | None = None, node: str | None = None, **more: Any
) -> Iterator[None]:
    """Bind `incident`, `job` (``namespace/name``), `node` and any `more` keys for the duration of the block.

    Keys given as None are not bound. Nesting works: inner blocks add to and then restore the outer context.
    """
    values = {k: v for k, v in {"incident": incident, "job": job, "node": node, **more}.items() if v is not None}
    with structlog.contextvars.bound_contextvars(**values):
        yield


def job_ref(namespace: str, name: str) -> str:
    """The job's log/display key, ``namespace/name``."""
    return f"{namespace}/{name}"


def log_decision(logger: Any, *, action: str, reason: str, job: str, incident: str | None = None, **more: Any) -> None:
    """Write the one INFO line per decision: ``event="decision"`` with `action`, `reason`, `job`, `incident`."""
    logger.info("decision", action=action, reason=reason, job=job, incident=incident, **more)
