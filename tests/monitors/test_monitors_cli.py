"""`starter.py monitors ...` as an operator runs it: real processes against the dev server, with
exit codes 0 for success and 2 (one line on stderr) for bad input or an unknown monitor."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from collections.abc import Callable

from temporalio.client import Client

from tests.support.harness import running_worker
from tests.support.monitors import until
from tests.support.processes import refusal, run_cli
from treadle.web.events import running_monitors_query
from treadle.workflows.monitors.models import MonitorView, monitor_workflow_id
from treadle.workflows.monitors.workflow import MonitorWorkflow


class Cli:
    """The ``monitors`` commands, each a process of its own. What they wait for (a check-in
    recorded, a listing visible) is waited for in this process, through the same queries the
    commands make; a command then shows it: a process per look would cost a Python start-up
    (two CPU seconds) every 0.2 s."""

    def __init__(self, address: str, client: Client | None = None) -> None:
        self.address = address
        self.client = client
        self.task_queue = f"test-{uuid.uuid4().hex[:12]}"

    async def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return await run_cli(
            "--address", self.address, "--task-queue", self.task_queue, "monitors", *args
        )

    async def ok(self, *args: str) -> str:
        done = await self(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    async def refused(self, *args: str) -> str:
        """Exit code 2 and exactly one line on stderr; returns it."""
        return refusal(await self(*args))

    async def show(self, slug: str) -> MonitorView:
        return MonitorView.model_validate_json(await self.ok("show", slug, "--json"))

    async def until(
        self, slug: str, check: Callable[[MonitorView], bool], timeout: float = 60
    ) -> MonitorView:
        """``show --json`` once the monitor's view (its query, asked here) satisfies ``check``;
        the command's view must satisfy it too."""
        assert self.client is not None
        handle = self.client.get_workflow_handle_for(MonitorWorkflow.run, monitor_workflow_id(slug))
        await until(handle, check, timeout=timeout)  # a watchdog, not a measured duration
        shown = await self.show(slug)
        assert check(shown), shown.model_dump_json(indent=1)
        return shown

    async def listed(self, slug: str, timeout: float = 60) -> dict[str, object]:
        """The `list --json` row of a monitor, once visibility shows it (asked here)."""
        assert self.client is not None
        query = running_monitors_query(self.task_queue)
        wanted = monitor_workflow_id(slug)
        deadline = asyncio.get_running_loop().time() + timeout  # a watchdog
        while wanted not in [e.id async for e in self.client.list_workflows(query)]:
            assert asyncio.get_running_loop().time() < deadline, f"{slug} never listed"
            await asyncio.sleep(0.2)
        rows = json.loads(await self.ok("list", "--json"))
        [row] = [row for row in rows if row["slug"] == slug]
        return dict(row)


def slug() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


async def test_an_operator_creates_checks_pauses_resumes_and_deletes_a_monitor(
    client: Client, temporal_address: str
) -> None:
    """create prints the ping key and curl line; list, show (text and JSON), checkin, pause,
    resume, disable and delete all work and say what they did."""
    cli, name = Cli(temporal_address, client), slug()
    async with running_worker(client, cli.task_queue):
        created = await cli.ok(
            "create",
            name,
            "--cron",
            "30 2 * * *",
            "--timezone",
            "America/New_York",
            "--name",
            "Nightly backup",
            "--max-runtime",
            "30",
        )
        assert f"Created monitor {name} (cron '30 2 * * *' (America/New_York)" in created
        key_match = re.search(rf"Ping key: ({name}\.[A-Za-z0-9_-]+)", created)
        assert key_match, created
        key = key_match.group(1)
        assert f"curl -fsS -m 10 --retry 3 -o /dev/null http://127.0.0.1:8780/ping/{key}" in created
        assert "already exists" in await cli.refused("create", name, "--interval", "5")

        row = await cli.listed(name)
        assert (row["name"], row["schedule"], row["answered"]) == (
            "Nightly backup",
            "cron '30 2 * * *' (America/New_York)",
            True,
        )
        table = await cli.ok("list")
        assert re.search(rf"^{name}\s+Nightly backup\s+cron '30 2", table, re.MULTILINE), table
        assert "SLUG" in table.splitlines()[0]

        assert "Sent in_progress check-in" in await cli.ok(
            "checkin", name, "--status", "in_progress"
        )
        await cli.until(name, lambda v: v.open_run is not None)
        await cli.ok("checkin", name, "--status", "ok", "--output", "42 files", "--exit-code", "0")
        view = await cli.until(name, lambda v: v.health.value == "healthy")
        [run] = view.recent
        assert (run.status.value, run.source.value, run.output, run.exit_code) == (
            "ok",
            "manual",
            "42 files",
            0,
        )
        assert run.duration_seconds is not None and view.ping_key == key

        text = await cli.ok("show", name)
        assert f"{name}: Nightly backup" in text
        assert "health:        healthy" in text and f"ping key:      {key}" in text
        assert re.search(r"^day\s+1\s+0\s+0\s+0\s+\S+\s+\S+\s+100%", text, re.MULTILINE), text
        assert re.search(r"^#1\s+ok\s+manual\s+.*42 files$", text, re.MULTILINE), text

        assert await cli.ok("pause", name) == f"Paused monitor {name}.\n"
        paused = await cli.show(name)
        assert (paused.status.value, paused.next_expected) == ("paused", None)
        resumed = await cli.ok("resume", name)
        assert resumed.startswith(f"Resumed monitor {name}; next run expected: ")
        assert await cli.ok("disable", name) == f"Disabled monitor {name}.\n"
        await cli.ok("checkin", name, "--status", "error")
        refused = await cli.until(name, lambda v: v.refused_total == 1)
        assert "disabled" in refused.refusals[0].reason and refused.total_checkins == 1
        await cli.ok("resume", name)

        deleted = await cli.ok("delete", name)
        assert deleted == f"Deleted monitor {name} (1 check-ins, 0 failures).\n"
        assert "it was deleted" in await cli.refused("show", name)


async def test_monitors_without_a_worker_still_list_and_take_check_ins(
    client: Client, temporal_address: str
) -> None:
    """With no worker, `list` shows the monitor from its memo (health unknown to it) and
    `checkin` is accepted; a worker started later records it."""
    cli, name = Cli(temporal_address, client), slug()
    created = json.loads(await cli.ok("create", name, "--interval", "15", "--json"))
    assert created["ping_url"] == f"http://127.0.0.1:8780/ping/{created['ping_key']}"
    assert created["schedule"] == "every 15 min"
    row = await cli.listed(name)
    assert (row["answered"], row["health"], row["schedule"]) == (False, None, "every 15 min")
    assert "? (no answer)" in await cli.ok("list")
    await cli.ok("checkin", name, "--status", "error", "--exit-code", "4", "--output", "oops")
    async with running_worker(client, cli.task_queue):
        view = await cli.until(name, lambda v: v.total_checkins == 1)
        assert (view.health.value, view.recent[0].exit_code) == ("failing", 4)
        await cli.ok("delete", name)


async def test_bad_input_and_unknown_monitors_exit_2_with_one_line(temporal_address: str) -> None:
    """Unknown or invalid slugs, invalid cron expressions and time zones, and inconsistent
    check-ins are refused before anything is created or sent."""
    cli = Cli(temporal_address)
    missing = slug()
    for command in ("show", "pause", "resume", "disable", "delete"):
        line = await cli.refused(command, missing)
        assert line == f"error: no monitor '{missing}' in namespace default"
    assert "no monitor" in await cli.refused("checkin", missing, "--status", "ok")
    assert "invalid slug 'Bad'" in await cli.refused("show", "Bad")
    assert "invalid slug 'x'" in await cli.refused("create", "x", "--interval", "5")
    assert "cron expression '61 * * * *'" in await cli.refused(
        "create", slug(), "--cron", "61 * * * *"
    )
    assert "has 3 field(s)" in await cli.refused("create", slug(), "--cron", "* * *")
    assert "unknown time zone 'Moon/Base'" in await cli.refused(
        "create", slug(), "--cron", "0 9 * * *", "--timezone", "Moon/Base"
    )
    assert "time zone 'localtime' depends on the host" in await cli.refused(
        "create", slug(), "--cron", "0 9 * * *", "--timezone", "localtime"
    )
    assert "invalid slug 'abc\\n'" in await cli.refused("create", "abc\n", "--interval", "5")
    assert "--timezone goes with --cron" in await cli.refused(
        "create", slug(), "--interval", "5", "--timezone", "UTC"
    )
    assert "greater than or equal to 1" in await cli.refused(
        "create", slug(), "--interval", "5", "--margin", "0"
    )
    assert "cannot have exit code 3" in await cli.refused(
        "checkin", missing, "--status", "ok", "--exit-code", "3"
    )
