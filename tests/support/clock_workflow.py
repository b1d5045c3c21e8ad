"""A workflow that reads the wall clock, as workflow code must not: the sandbox's check
(tests/durability/test_sandbox.py). Its own module, importing nothing else, because the sandbox
imports a workflow's module afresh, under its restrictions."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow


@workflow.defn(sandboxed=True)
class ReadsTheClock:
    @workflow.run
    async def run(self) -> str:
        return datetime.now().isoformat()  # not workflow.now(): the sandbox refuses it
