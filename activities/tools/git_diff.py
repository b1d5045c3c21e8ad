"""``git_diff``: the example of your own tool (see ``activities/tools/custom.py``).

Shows what is uncommitted in the workspace's git repository, read-only. git reads its repository's
configuration, which can name programs to run (external diff drivers, text conversion, a file
system monitor); they are switched off here, and git's global and system configuration is not
read, so a diff runs no code from the workspace.
"""

from __future__ import annotations

import asyncio
import os
import tempfile

from pydantic import Field

from treadle.activities.tools.custom import Tool, ToolContext, ToolError, ToolOutput
from treadle.workflows.agent.messages.tool_args import ToolArgs

MAX_DIFF_BYTES = 2_000_000
"""Read at most this much of git's output (the run's output cap then applies)."""
TIMEOUT_SECONDS = 30.0


class GitDiffArgs(ToolArgs):
    path: str = Field(".", description="File or directory to diff, relative to the workspace.")
    staged: bool = Field(False, description="Show staged changes instead of unstaged ones.")
    stat: bool = Field(False, description="Only a summary: files changed, lines added/removed.")


async def git_diff(args: GitDiffArgs, context: ToolContext) -> ToolOutput:
    target = context.path(args.path)
    argv = [
        "git",
        "--no-pager",
        "-c", "core.fsmonitor=false",
        "-c", "diff.external=",
        "-c", "core.hooksPath=/dev/null",
        "diff", "--no-ext-diff", "--no-textconv", "--no-color",
        *(["--cached"] if args.staged else []),
        *(["--stat"] if args.stat else []),
        "--", str(target),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as home:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "LC_ALL": "C",
        }
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=context.workspace,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError:
            raise ToolError("git is not installed on this worker") from None
        try:
            out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise ToolError(f"git diff took longer than {TIMEOUT_SECONDS:g} s") from None
    if process.returncode != 0:
        message = err.decode(errors="replace").strip()
        if "not a git repository" in message.lower():
            raise ToolError("the workspace is not a git repository")
        first = message.splitlines()[0] if message else f"exit code {process.returncode}"
        raise ToolError(f"git diff failed: {first}")
    text = out[:MAX_DIFF_BYTES].decode(errors="replace")
    return ToolOutput(text=text or "(no changes)", omitted_chars=max(0, len(out) - MAX_DIFF_BYTES))


TOOL = Tool(
    name="git_diff",
    description="Show the uncommitted changes in the workspace's git repository (read-only).",
    args=GitDiffArgs,
    run=git_diff,
    mutating=False,  # read-only: no snapshot after it, no post-tools hook
    target=lambda args: args.path,
)
