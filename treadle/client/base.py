"""What every part of ``AgentClient`` shares: the Temporal client, where runs start, the store,
and the one place that asks runs (``calls.Calls``)."""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.client import Client

from treadle.client.calls import Calls
from treadle.client.workspaces import WorkspaceClient
from treadle.workflows.agent.messages.models import TASK_QUEUE

__all__ = ["ClientBase"]


class ClientBase:
    """The state ``AgentClient``'s parts (runs, threads) share; it holds no run's state."""

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = TASK_QUEUE,
        store: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._temporal = client
        self._task_queue = task_queue
        self._store = store
        self._environ = environ
        self._calls = Calls(client)

    @property
    def temporal(self) -> Client:
        """The Temporal client underneath, for what is not an agent run's (jobs, monitors)."""
        return self._temporal

    @property
    def namespace(self) -> str:
        return self._temporal.namespace

    @property
    def task_queue(self) -> str:
        """Where runs start unless told otherwise (a worker must poll it)."""
        return self._task_queue

    @property
    def workspace(self) -> WorkspaceClient:
        """Runs' durable workspaces: snapshots listed, any step's files, a step checked out,
        two steps compared (read from the workers' store: the client's ``store``)."""
        return WorkspaceClient(self._calls, store=self._store, environ=self._environ)
