"""Replay: recorded cluster history or a scenario file through the agent's own decision path, on a virtual clock.

Public API (what ``fault-agent replay`` and the simulation benchmark use)::

    from agent.replay import Record, replay, run_replay, read_inputs, Problems

    outputs, result = replay(records, settings)          # records: Iterable[Record], time order
    result = run_replay(records, settings, on_output=print)  # streaming: nothing kept per record

- :class:`Record`: one change as a watch delivered it (``t_ms``, ``type``, ``resource``, ``object``, ``source``).
- :class:`Output`: one decision, intended write or event with its virtual time (``as_dict()`` is the ``--json``
  line).
- :func:`read_inputs`: records from recording files/folders, JSON-lines and scenario files; bad lines go to a
  :class:`Problems`.
- :func:`compare`: two configurations' decisions side by side (agent.replay.compare).

See docs/replay.md for the semantics (what a replayed write does, readiness, limits).
"""

from agent.replay.compare import Difference, compare_decisions, other_configuration, totals
from agent.replay.driver import ReplayResult, replay, run_replay
from agent.replay.ports import Output
from agent.replay.records import InputProblem, Problems, Record, read_inputs, scenario_records

__all__ = [
    "Difference",
    "InputProblem",
    "Output",
    "Problems",
    "Record",
    "ReplayResult",
    "compare_decisions",
    "other_configuration",
    "read_inputs",
    "replay",
    "run_replay",
    "scenario_records",
    "totals",
]
