"""The one client of agent runs: ``AgentClient`` starts runs and threads, reads their status,
trace and result, decides what they wait for (approve / reject / modify / guide), sends
threads their messages and waits for the answers, answers client queries, wakes parked runs,
watches live streams, exports and imports threads (Loom's JSON), reads durable workspaces and
runs scheduled agents. The ``treadle`` command, the browser page and Python programs all use it.

The package's map:

agent.py          AgentClient: the client, its connection, its parts
base.py           what the parts share: the Temporal client, the task queue, the store
calls.py          the one place that asks a run (queries, updates, signals), errors translated
errors.py         the client's errors, their tree in its docstring
results.py        the client's typed answers (StartedRun, Decided, RunSummary...)
runs.py           start, status, trace, result, list, decide, answer, wake, watch
threads.py        send, wait for the answer, close, export, import
forks.py          a new run or thread from any step of another (its record and snapshot)
memory.py         long-term memory by namespace: list, recall, remember, edit, forget
thread_import.py  an exported thread planned as a new one, under the importer's settings
workspaces.py     workspace snapshots: list, files, check-out, diff
workdirs.py       where a run works, resolved and checked before anything starts
schedules.py      scheduled agents: create, list, show, pause, unpause, trigger, delete
describe.py       a run's requests in a few words, the same on every face
text.py           a reply's streamed text shown once (across retries), for live views
"""

from treadle.client.agent import AgentClient
from treadle.client.errors import (
    AgentClientError,
    InvalidRequest,
    MemoryRefused,
    NoStream,
    NoWorkerAnswered,
    Refused,
    RunCannotAnswer,
    RunEnded,
    RunExists,
    RunNotFound,
    ScheduleConflict,
    ScheduleError,
    ScheduleNotFound,
    StoredContentUnavailable,
    TemporalRefused,
    ThreadUnavailable,
    WorkspaceUnavailable,
)
from treadle.client.results import (
    Decided,
    Forked,
    ImportedThread,
    RunOverview,
    RunSummary,
    StartedRun,
    Woken,
)
from treadle.client.runs import FILTERS, check_arguments
from treadle.client.schedules import (
    CreateAction,
    DeployedSchedule,
    RunningSlot,
    ScheduleClient,
    ScheduleCreated,
    ScheduleListing,
    ScheduleShown,
)
from treadle.client.workspaces import (
    CheckedOut,
    SnapshotInfo,
    WorkspaceChange,
    WorkspaceClient,
    WorkspaceFile,
)

__all__ = [
    "FILTERS",
    "AgentClient",
    "AgentClientError",
    "CheckedOut",
    "CreateAction",
    "Decided",
    "DeployedSchedule",
    "Forked",
    "ImportedThread",
    "InvalidRequest",
    "MemoryRefused",
    "NoStream",
    "NoWorkerAnswered",
    "Refused",
    "RunCannotAnswer",
    "RunEnded",
    "RunExists",
    "RunNotFound",
    "RunOverview",
    "RunSummary",
    "RunningSlot",
    "ScheduleClient",
    "ScheduleConflict",
    "ScheduleCreated",
    "ScheduleError",
    "ScheduleListing",
    "ScheduleNotFound",
    "ScheduleShown",
    "SnapshotInfo",
    "StartedRun",
    "StoredContentUnavailable",
    "TemporalRefused",
    "ThreadUnavailable",
    "Woken",
    "WorkspaceChange",
    "WorkspaceClient",
    "WorkspaceFile",
    "WorkspaceUnavailable",
    "check_arguments",
]
