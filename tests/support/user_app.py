"""A user's own app, as docs/embedding.md has one write it: an activity of its own, a tool
module, a post-tools hook and a model provider, all from ``treadle``'s face."""

from __future__ import annotations

from pydantic import Field
from temporalio import activity

from treadle import (
    HookRequest,
    HookResult,
    ProviderSpec,
    Tool,
    ToolArgs,
    ToolContext,
    ToolError,
    ToolOutput,
)

ACME = ProviderSpec(
    name="acme",
    protocol="openai",
    default_base_url="https://llm.acme.invalid/v1",
    key_env="ACME_API_KEY",
    key_required=True,
)
"""A model provider of the app's own: ``acme:MODEL``, its URL in ``ACME_BASE_URL``."""


@activity.defn
async def greet(name: str) -> str:
    """The app's own activity, beside Treadle's on one worker."""
    return f"Hello, {name}"


class AppendLineArgs(ToolArgs):
    path: str = Field(description="File to append to, relative to the workspace.")
    line: str = Field(description="The line to append.")


async def append_line(args: AppendLineArgs, context: ToolContext) -> ToolOutput:
    target = context.path(args.path)
    if target.is_dir():
        raise ToolError(f"{args.path} is a directory")
    with target.open("a") as file:
        file.write(args.line + "\n")
    return ToolOutput(text=f"{args.path} has {len(target.read_text().splitlines())} line(s)")


TOOLS = (
    Tool(
        name="append_line",
        description="Append one line to a file in the workspace.",
        args=AppendLineArgs,
        run=append_line,
        target=lambda args: args.path,
        mutating=True,
    ),
)


class StampHook:
    """count the lines the step left in the workspace's files"""

    name = "stamp"

    async def run(self, request: HookRequest) -> HookResult:
        return HookResult(
            hook=self.name,
            outcome="done",
            detail=f"step {request.step}: {', '.join(request.files) or 'no file'} changed",
        )
