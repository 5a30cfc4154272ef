"""The leadership term: whether this replica leads now, and whether a new term began since it last looked."""

from __future__ import annotations

from collections.abc import Callable


class LeadershipTerm:
    """Follows this replica's leadership; a changed actor (``<identity>#<term>``) while leading is a new term.

    Args:
        is_leader: whether this replica may act and publish now.
        actor: this replica's ``<identity>#<term>`` (LeaderElector.actor), written on a job when claiming it
            (agent.core.fence).
    """

    def __init__(self, is_leader: Callable[[], bool], actor: Callable[[], str]) -> None:
        self.is_leader = is_leader
        self.actor = actor
        self.was_leader = False
        self.term_actor: str | None = None  # the actor of the term :meth:`check` last saw
        # job UID -> its actor annotation when this term adopted the job (agent.core.fence.may_claim)
        self.actor_baseline: dict[str, str | None] = {}

    def check(self) -> tuple[bool, bool]:
        """(leading now, a new term began): a new term starts when this replica becomes leader or its actor
        changes while leading; the adopted jobs' baselines are forgotten then."""
        leader = self.is_leader()
        actor = self.actor() if leader else self.term_actor
        new_term = leader and (not self.was_leader or actor != self.term_actor)
        if new_term:
            self.term_actor = actor
            self.actor_baseline.clear()
        self.was_leader = leader
        return leader, new_term
