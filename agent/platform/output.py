"""Standard output for the subcommands: what to do when its reader goes away (``fault-agent … | head``).

Used by the ``fault-agent`` dispatcher (agent.cli) and by subcommands that stream (agent.platform.replay_cli); it
lives here, below both, so that the commands never import the dispatcher.
"""

from __future__ import annotations

import os
import sys

EXIT_PIPE = 128 + 13
"""The exit status of a process killed by SIGPIPE, as the shell reports ``yes | head``'s ``yes``."""


def output_closed() -> int:
    """Standard output's reader went away (``… | head``): point stdout at /dev/null so the interpreter's final
    flush does not fail again, and return :data:`EXIT_PIPE`. No message: the reader asked for no more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (a test's captured stdout)
        pass
    return EXIT_PIPE
