"""testbed.heartbeat.TrainingLoop.resume_now on the testbed's apiserver: after a hang, the first step from the last
checkpoint is on the Lease when the call returns (not at the client's next interval), and the loop steps on."""

from __future__ import annotations

import asyncio
import time

from kubernetes_asyncio import client
from support.polling import eventually

from agent.core.progress import CHECKPOINT_STEP_ANNOTATION, STEP_ANNOTATION, lease_name
from testbed.cluster import Testbed
from testbed.heartbeat import TrainingLoop


async def test_resume_now_writes_the_first_step_from_the_checkpoint_at_once(
    testbed: Testbed, kube_client: client.ApiClient, namespace: str
) -> None:
    leases = client.CoordinationV1Api(kube_client)
    # the client writes every 30 s: only resume_now's own write can put the resumed step on the Lease in time
    loop = TrainingLoop(testbed, namespace, "job-a", "job-a-worker-0", step_s=0.1, interval_s=30, checkpoint_every=3)
    loop.start()
    try:

        async def past_a_checkpoint() -> bool:
            return loop.checkpoint >= 3 and loop.step > loop.checkpoint

        await eventually(past_a_checkpoint, timeout_s=20, interval_s=0.05, what="a step past a checkpoint")
        loop.hang()
        await asyncio.sleep(0.3)  # a step under way when hang() came is done
        hung_at, checkpoint = loop.step, loop.checkpoint
        before = time.time()
        step, sent, done = await asyncio.to_thread(loop.resume_now)
        assert step == checkpoint + 1
        assert before <= sent <= done <= time.time()
        lease = await leases.read_namespaced_lease(lease_name("job-a"), namespace)
        notes = lease.metadata.annotations or {}
        assert notes[STEP_ANNOTATION] == str(step)
        assert notes[CHECKPOINT_STEP_ANNOTATION] == str(checkpoint)
        assert step <= hung_at  # from the checkpoint, not from where it stopped

        async def stepping_on() -> bool:
            return loop.step >= step + 3

        await eventually(stepping_on, timeout_s=10, interval_s=0.05, what="steps after the resumed one")
    finally:
        loop.stop()
