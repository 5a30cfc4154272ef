"""The force follow-up after a RestartJob Command whose job version the GET sent with the restart did not prove
(the job changed on the apiserver since the watch cache saw it): when Volcano already took the Command before the
follow-up's first read, that read answers the new version; the old pods, created under the version before it, must
go at once, not after the follow-up's whole 10 s wait for a change that already happened (the defect: the version
read was taken as the one before the Command). Runs on a virtual-time loop, the engine's clock on its time."""

from __future__ import annotations

from support.fakes import FakeWriter, Scripted, script
from support.follow_ups import deleted_once, two_pod_job


def _taken_before_read() -> tuple[FakeWriter, Scripted]:
    """Volcano took the Command at once: every read of the job answers status.version 1 (it was 0 when the
    restart was decided), its resourceVersion moved on (so the GET sent with the restart proves nothing), and the
    old pods are still there until the follow-up deletes them. Returns the writer and its deletions' calls."""
    writer = FakeWriter()
    script(writer, "job_meta", answer=("2", {}))  # the cache holds resourceVersion "1"
    script(writer, "job_version", answer="1")
    script(writer, "pods_remaining", does=list)
    return writer, script(writer, "delete_pods")


def test_old_pods_go_at_once_when_volcano_took_the_command_before_the_first_read() -> None:
    went = deleted_once(_taken_before_read, two_pod_job(version="0"))
    assert went < 1.0, f"the old pods went {went:.2f} s after the Command (loop time), Volcano had taken it at once"
