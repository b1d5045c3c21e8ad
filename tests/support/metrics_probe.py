"""A workflow that records Treadle's workflow metrics and logs between timers: with no workflow
cache, each record is replayed by every later workflow task, which must not count it again."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from treadle.workflows import telemetry

PROBE_STEPS = 3


@workflow.defn
class MetricsProbeWorkflow:
    """Three steps with a timer each; one stuck event, one human wait, one client query."""

    @workflow.run
    async def run(self, steps: int) -> int:
        for step in range(1, steps + 1):
            telemetry.step_started(step)
            workflow.logger.info("probe.step", extra={"probe": step})
            if step == 2:
                telemetry.stuck("repeated_error")
            await workflow.sleep(timedelta(milliseconds=10))
        telemetry.human_wait_started("write_file")
        telemetry.human_wait_ended("write_file", "approved")
        telemetry.client_query("asked")
        return steps
