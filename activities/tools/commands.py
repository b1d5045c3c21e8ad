"""``run_command``: an allowed program, run without a shell in the workspace, confined (see
``confinement``), with a minimal environment, heartbeats, a timeout that kills its whole
process group, and capped output."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from temporalio import activity

from treadle.activities.errors import ToolError
from treadle.activities.heartbeat import heartbeating
from treadle.activities.tools import processes
from treadle.activities.tools.confinement import (
    Confinement,
    check_arguments,
    detect,
    sandboxed_argv,
)
from treadle.activities.tools.output import ToolOutput, content_hash
from treadle.activities.tools.workspace import workspace_root
from treadle.workflows.agent.messages.catalogue import RunCommandArgs
from treadle.workflows.agent.messages.tool_args import ToolPolicy

OUTPUT_DRAIN_GRACE_SECONDS = 2.0
"""After a command ends, how long to wait for its output pipe to close."""

SECRET_NAME_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
"""An environment variable whose name contains one of these never reaches a command."""
PASSED_ENV_NAMES = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "VIRTUAL_ENV"}
)
"""The only variables (with ``LC_*``) a command inherits; anything else may carry credentials."""


def command_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The minimal environment a command runs with: no API keys, tokens or passwords."""
    return {
        name: value
        for name, value in environ.items()
        if (name in PASSED_ENV_NAMES or name.startswith("LC_"))
        and not any(marker in name.upper() for marker in SECRET_NAME_MARKERS)
    }


class _CommandProtocol(asyncio.SubprocessProtocol):
    """Collects a command's combined output and tells when it exits.

    Our own protocol rather than ``asyncio.subprocess.Process``, whose ``wait()`` also waits for
    the output pipe to close: a background child holding the pipe would hang it past exit.
    Only the first ``keep`` bytes are kept, so a flood of output cannot exhaust the worker.
    """

    def __init__(self, keep: int) -> None:
        loop = asyncio.get_running_loop()
        self.keep = keep
        self.data = bytearray()
        self.dropped = 0
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        room = max(0, self.keep - len(self.data))
        self.data += data[:room]
        self.dropped += max(0, len(data) - room)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.output_closed.done():
            self.output_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def run_command(
    workspace: Path,
    args: RunCommandArgs,
    policy: ToolPolicy,
    *,
    confinement: Confinement = Confinement.AUTO,
) -> ToolOutput:
    """Run an allowed program (no shell) in the workspace; its exit code and combined output.

    Arguments that name paths outside the workspace are refused before anything starts; under
    bubblewrap the program cannot reach outside the workspace at all (see ``confinement``).
    """
    if not policy.allow_run_command:
        raise ToolError("run_command is not allowed in this run (allow_run_command is off)")
    try:
        argv = shlex.split(args.command)
    except ValueError as exc:
        raise ToolError(f"cannot split the command into words: {exc}") from exc
    if not argv:
        raise ToolError("the command is empty")
    program = argv[0]
    # Exact match only: '/bin/rm' or './x' must not slip past an allowlist that names 'rm'.
    if program not in policy.command_allowlist:
        allowed = ", ".join(sorted(policy.command_allowlist)) or "(none)"
        raise ToolError(f"program {program!r} is not allowed; allowed programs: {allowed}")
    root = await asyncio.to_thread(workspace_root, workspace)
    sandbox = await asyncio.to_thread(detect, confinement)
    # Before anything starts: a refused argument means the command does not run at all.
    await asyncio.to_thread(
        check_arguments, root, program, argv[1:], os_confined=sandbox.bwrap is not None
    )
    env = command_environment(os.environ)
    argv = await asyncio.to_thread(_launch_argv, root, argv, env, sandbox.bwrap)
    timeout = policy.command_timeout_seconds
    if args.timeout_seconds is not None:
        timeout = min(timeout, args.timeout_seconds)

    mark = await asyncio.to_thread(processes.mark_this_attempt)
    if mark.retried:
        # A worker that died mid-command may have left its processes running: one copy only.
        await asyncio.to_thread(processes.kill_marked, mark, leftovers=True)
    env[processes.MARK_VARIABLE] = mark.token
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.subprocess_exec(
            # UTF-8 needs at most 4 bytes a character, so this always fills the character cap.
            lambda: _CommandProtocol(keep=4 * policy.max_output_chars),
            *argv,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Its own process group, so a timeout kills the children it started too.
            start_new_session=True,
            preexec_fn=processes.die_with_worker(),
        )
    except FileNotFoundError:
        raise ToolError(f"program {program!r} was not found on the worker's PATH") from None
    except OSError as exc:
        raise ToolError(f"program {program!r} could not be started: {exc.strerror}") from exc

    pid = transport.get_pid()
    started = loop.time()

    def running_for() -> str:
        return f"{program} running for {loop.time() - started:.0f}s"

    # Heartbeats let Temporal notice a dead worker long before the tool timeout. They go on
    # through the kill and the drain below (up to twice the grace): with a heartbeat timeout
    # of two seconds, a silent drain would time the attempt out and run the command again.
    async with heartbeating(progress=running_for):
        try:
            await asyncio.to_thread(processes.record_group, mark, pid)
            done, _ = await asyncio.wait({protocol.exited}, timeout=timeout)
            finished = bool(done)
        finally:
            # Also on cancellation and after a normal exit: no process a command started
            # outlives it, whether it stayed in the group or not.
            _kill_group(pid)
            await asyncio.to_thread(processes.kill_marked, mark)
            await asyncio.wait({protocol.exited}, timeout=OUTPUT_DRAIN_GRACE_SECONDS)
            # A process that left the group may still hold the pipe; keep what arrived by then.
            await asyncio.wait({protocol.output_closed}, timeout=OUTPUT_DRAIN_GRACE_SECONDS)
            transport.close()
            await asyncio.to_thread(processes.forget_group, mark, pid)

    body = protocol.text() or "(no output)"
    omitted = protocol.dropped
    code = transport.get_returncode()
    activity.logger.info(
        "tool.command_finished program=%s exit_code=%s timed_out=%s confined=%s",
        program,
        code,
        not finished,
        sandbox.bwrap is not None,
    )
    if not finished:
        return ToolOutput(
            f"command timed out after {timeout:g}s; output so far:\n{body}",
            success=False,
            omitted_chars=omitted,
        )
    if code is not None and code < 0:
        return ToolOutput(
            f"command was killed by signal {-code}\n{body}", success=False, omitted_chars=omitted
        )
    if code != 0:
        return ToolOutput(
            f"command exited with code {code}\n{body}", success=False, omitted_chars=omitted
        )
    return ToolOutput(
        f"exit code 0\n{body}",
        # The same command printing the same output again is not progress (Nexora).
        content_hashes=((args.command, content_hash(body.encode())),),
        omitted_chars=omitted,
    )


def stop_lost_command() -> None:
    """Kill what a lost attempt of this activity's command left running on this host (its
    marked processes and its recorded group), when the command is not run again."""
    processes.kill_marked(processes.mark_this_attempt(), leftovers=True)


def _launch_argv(
    root: Path, argv: list[str], env: Mapping[str, str], bwrap: str | None
) -> list[str]:
    """What to start: the command itself, or bubblewrap running it."""
    executable = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if executable is None:
        raise ToolError(f"program {argv[0]!r} was not found on the worker's PATH")
    if bwrap is None:
        return argv
    return sandboxed_argv(bwrap, root, executable, argv, env)


def _kill_group(pid: int) -> None:
    # The group id is the child's pid (start_new_session); an empty group is already gone.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
