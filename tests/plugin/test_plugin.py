"""The plugin's arguments: your own providers, hooks and tools named once per process and
checked where a run's config is, bad arguments refused when the plugin is made, and a worker
that lacks a provider a run names failing that run with one line instead of wedging it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.client import Client, WorkflowFailureError

from tests.support.harness import start_agent
from tests.support.processes import clean_env, server_address, start_worker
from tests.support.user_app import ACME, TOOLS, StampHook
from treadle import AgentConfig, AgentInput, ProviderSpec, TreadlePlugin
from treadle.plugin import DeploymentError
from treadle.stores import StoreSettingsError
from treadle.workflows.agent.messages import hooks, providers


def test_a_provider_is_named_once_and_never_over_a_built_in_one() -> None:
    """The same provider named again is nothing new; a built-in name, or the same name for
    another provider, is refused and adds nothing; a run may then name it, with its default
    model."""
    name = f"p-{uuid.uuid4().hex[:6]}"
    mine = ProviderSpec(name=name, protocol="anthropic", default_base_url="http://x/v1")
    providers.register([mine])
    providers.register([mine])
    with pytest.raises(ValueError, match="is built in"):
        providers.register([ProviderSpec(name="openai", protocol="openai", default_base_url="u")])
    other = ProviderSpec(name=name, protocol="openai", default_base_url="http://y/v1")
    with pytest.raises(ValueError, match="named twice"):
        providers.register([other])
    assert providers.resolve(f"{name}:claude") == (mine, "claude")
    assert mine.base_url_env == f"{name.upper().replace('-', '_')}_BASE_URL"
    with pytest.raises(ValueError, match="has no default model"):
        AgentInput(task="t", workspace="/w", model=name)
    with pytest.raises(ValueError, match="does not match"):
        ProviderSpec(name="Two Words", protocol="openai", default_base_url="u")


def test_a_hook_a_plugin_names_is_one_a_runs_config_may_list() -> None:
    """The plugin names its hooks (with their docstring's line) for runs' configs; an unknown
    hook is still refused, and a built-in name cannot be taken."""
    TreadlePlugin(hooks=[StampHook()], store="none")
    assert AgentConfig(hooks=("stamp", "git_commit")).hooks == ("stamp", "git_commit")
    assert hooks.known_hooks()["stamp"].startswith("count the lines")
    with pytest.raises(ValidationError, match="unknown hook"):
        AgentConfig(hooks=("nowhere",))
    with pytest.raises(ValueError, match="is built in"):
        hooks.register({"git_commit": "another"})


def test_the_same_tools_are_loaded_again_by_a_second_plugin() -> None:
    """A starter's plugin and a worker's in one process load the same tool module: the second
    adds nothing and is no error."""
    first = TreadlePlugin(tools=["tests.support.user_app"], store="none")
    second = TreadlePlugin(tools=[*TOOLS], store="none")
    assert first.tools == second.tools == TOOLS
    assert AgentConfig(tools=("append_line",)).tools == ("append_line",)


def test_arguments_that_cannot_work_are_refused_when_the_plugin_is_made(tmp_path: Path) -> None:
    """A workspace root without a store, a deployment name Temporal would refuse, a store URL
    of an unknown scheme: each refused at once, with one line."""
    with pytest.raises(ValueError, match="needs a store"):
        TreadlePlugin(store="none", workspace_root=tmp_path)
    with pytest.raises(DeploymentError, match=r"without a '\.'"):
        TreadlePlugin(deployment_name="my.agents")
    with pytest.raises(StoreSettingsError, match="unknown scheme"):
        TreadlePlugin(store="ftp://bucket/prefix")


async def test_a_worker_without_the_runs_provider_fails_the_run_with_one_line(
    client: Client, tmp_path: Path
) -> None:
    """A client that knows ``acme`` starts a run on a worker that does not (``treadle worker``,
    another process): the worker's workflow refuses the model string as the client would have,
    and the run fails with that line; its workflow task is not retried for ever."""
    TreadlePlugin(providers=[ACME], store="none")  # this process, the client, knows acme
    queue = f"no-acme-{uuid.uuid4().hex[:8]}"
    worker = await start_worker(server_address(client), queue, clean_env())
    try:
        handle = await start_agent(client, queue, "acme:large", tmp_path)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    finally:
        assert await worker.terminate() == 0
    assert "unknown model provider 'acme'" in str(failed.value.cause)
