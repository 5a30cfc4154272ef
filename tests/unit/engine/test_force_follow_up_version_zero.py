"""The force follow-up after a RestartJob Command on a Volcano Job never restarted before: Volcano omits
``status.version`` while it is 0 (``volcano.sh/apis`` v1.14.0 ``batch/v1alpha1`` ``JobStatus.Version``, ``json:
"version,omitempty"``), so the job's version reads "" while its pods carry ``volcano.sh/job-version: "0"``. That is
the same version, not one the pods are older than: the old pods must wait until Volcano took the Command (its
``killJob`` writes version 1), as for any other version.

The defect: "0" != "" was taken for "the pods' version is gone", and the follow-up deleted both pods with grace 0
at once, ~50 ms after the Command, while Volcano's ``killJob`` for it was still running. Every pod event of the
kill then reached Volcano's job controller before it saw its own deletion of the PodGroup; its syncs in Restarting
found the PodGroup Pending (the scheduler had flipped it once the pods went) and kept the stale
``status.terminating: 2``, and with no later event the job stayed Restarting with no pods and no PodGroup
(tests/e2e/test_gpu_nvsentinel.py, 3 of ~6 CI runs). Runs on a virtual-time loop, the engine's clock on its time."""

from __future__ import annotations

from support.follow_ups import deleted_once, two_pod_job, volcano_takes_it

TAKEN_AFTER_S = 2.0
"""When (loop seconds after the decision) Volcano takes the Command in this world: its job reads version 1."""


def test_the_pods_of_a_job_at_version_zero_wait_until_volcano_took_the_command() -> None:
    went = deleted_once(volcano_takes_it(TAKEN_AFTER_S), two_pod_job(version=""))
    assert TAKEN_AFTER_S <= went < TAKEN_AFTER_S + 1.0, (
        f"the old pods went {went:.2f} s after the Command (loop time); Volcano took it after {TAKEN_AFTER_S} s"
    )
