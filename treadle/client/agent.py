"""``AgentClient``: everything a person or a program does to agent runs and threads, in one
place. The ``treadle`` command and the browser page are thin faces over it; Python programs use
it as they are.

    client = await AgentClient.connect()               # as every Treadle client connects
    started = await client.start(AgentInput(task="...", model="openai:gpt-4o", workspace=...))
    status = await client.status(started.id)           # AgentStatus
    await client.approve(started.id)                   # Decided, or Refused with the reason
    async for item in client.watch(started.id):        # the live stream, to the run's end
        ...
    result = await client.result(started.id)           # AgentResult

Its parts, one concept each: ``runs`` (start, read, decide, answer, wake, watch), ``threads``
(send, wait for the answer, close, export, import), ``workspaces`` (``client.workspace``:
snapshots, files, check-outs, diffs) and ``schedules`` (``client.schedules``: scheduled agents).
Every query, update and signal is named by object (``AgentWorkflow.decide``), and every
Temporal error becomes one of ``treadle.client.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.client import Client

from treadle.client.memory import Memory
from treadle.client.schedules import ScheduleClient
from treadle.connection import connect
from treadle.workflows.agent.messages.models import TASK_QUEUE

__all__ = ["AgentClient"]


class AgentClient(Memory):
    """Agent runs, threads, their workspaces and scheduled agents, on one Temporal client.

    ``client`` must use Treadle's data converter (``treadle.connection.connect`` makes one;
    ``AgentClient.connect`` calls it). ``task_queue``: where runs start unless told otherwise
    (a worker must poll it). ``store``: where the workers keep conversations and workspace
    snapshots, as ``TREADLE_STORE`` says it (a directory, ``s3://BUCKET/PREFIX``, ``none``;
    default: ``TREADLE_STORE``, else the data directory's), read by ``export`` and
    ``workspace``. ``environ``: where that store's settings are read (default: this process's
    environment).
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = TASK_QUEUE,
        store: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(client, task_queue=task_queue, store=store, environ=environ)

    @classmethod
    async def connect(
        cls,
        *,
        address: str | None = None,
        namespace: str | None = None,
        profile: str | None = None,
        task_queue: str = TASK_QUEUE,
        store: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> AgentClient:
        """Connect as every Treadle client does (``treadle.connection.connect``):
        ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE`` and ``temporal.toml`` profiles
        (``temporalio.envconfig``), overridden by the arguments; the pydantic data converter,
        encryption (``TREADLE_ENCRYPTION_KEYS``) and External Storage. Raises
        ``treadle.connection.TemporalConnectionError`` when no server answers."""
        client = await connect(
            address=address, namespace=namespace, profile=profile, environ=environ, store=store
        )
        return cls(client, task_queue=task_queue, store=store, environ=environ)

    @property
    def schedules(self) -> ScheduleClient:
        """Scheduled agents: create, list, show, pause, unpause, trigger, delete."""
        return ScheduleClient(self.temporal, task_queue=self.task_queue)
