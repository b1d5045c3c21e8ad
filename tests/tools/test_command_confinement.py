"""run_command is confined: file arguments in every form, bubblewrap where it works, and its
processes die with the command, the worker and the activity attempt that started them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from tests.support.commands import BWRAP_WORKS, gone_within, marker, pids_with
from treadle.activities.tools import confinement as confinement_module
from treadle.activities.tools import processes
from treadle.activities.tools.builtin import Confinement, ToolActivities, execute_tool
from treadle.workflows.agent.messages.models import ToolCall, ToolPolicy, ToolRequest, ToolResult

ROOT = Path(__file__).resolve().parents[2]
POLICY = ToolPolicy(
    allow_run_command=True,
    command_allowlist=("cat", "diff", "grep", "head", "ls", "python3", "sort"),
    command_timeout_seconds=30,
)
REFUSED = "leads outside the workspace"


@pytest.fixture(
    params=[
        Confinement.OFF,
        pytest.param(
            Confinement.BWRAP,
            marks=pytest.mark.skipif(not BWRAP_WORKS, reason="bubblewrap does not work here"),
        ),
    ]
)
def mode(request: pytest.FixtureRequest) -> Confinement:
    """Every behaviour below holds with argument checks only and under bubblewrap."""
    return Confinement(request.param)


needs_bwrap = pytest.mark.skipif(not BWRAP_WORKS, reason="bubblewrap does not work here")


@pytest.fixture(autouse=True)
def fresh_announcements(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 'commands are not OS-confined' warning is logged once per process; reset per test."""
    monkeypatch.setattr(confinement_module, "_announced", set())


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "a.txt").write_text("b\na\n")
    (path / "patterns.txt").write_text("a\n")
    return path


@pytest.fixture
def outside(tmp_path: Path, workspace: Path) -> Path:
    """A directory beside the workspace, reachable from inside only through links."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret\n")
    (workspace / "dirlink").symlink_to(path)
    (workspace / "secret_link.txt").symlink_to(path / "secret.txt")
    (workspace / "dangling.txt").symlink_to(path / "new.txt")
    return path


async def command(
    workspace: Path, line: str, mode: Confinement = Confinement.AUTO, policy: ToolPolicy = POLICY
) -> ToolResult:
    return await execute_tool(
        workspace, "run_command", json.dumps({"command": line}), policy, confinement=mode
    )


def assert_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"


def assert_refused(result: ToolResult, *fragments: str) -> None:
    assert not result.success, result.output
    for fragment in fragments:
        assert fragment in result.output
    assert "top secret" not in result.output


async def assert_all_refused(
    workspace: Path, mode: Confinement, lines: list[str], *fragments: str
) -> None:
    """Every command line is refused, saying ``fragments``, and nothing of the outside shows."""
    for line in lines:
        assert_refused(await command(workspace, line, mode), *fragments)


# --------------------------------------------------------------------------------------------
# File arguments, in every form
# --------------------------------------------------------------------------------------------


async def test_glued_short_option_values_are_checked(
    workspace: Path, outside: Path, mode: Confinement
) -> None:
    """-o/abs, -o../x, -f/abs, -f../x and bundled -ro/abs are refused before anything runs."""
    lines = [
        f"sort -o{outside}/x a.txt",
        "sort -o../outside/x a.txt",
        f"sort -ro{outside}/x a.txt",
        f"grep -f{outside}/secret.txt a.txt",
        "grep -f../outside/secret.txt a.txt",
        "grep -nf../outside/secret.txt a.txt",
    ]
    await assert_all_refused(workspace, mode, lines, REFUSED)
    assert_untouched(outside)


async def test_a_glued_value_with_a_directory_asks_for_two_words(
    workspace: Path, mode: Confinement
) -> None:
    """-osub/out.txt is ambiguous (is '/out.txt' the value of a flag 'b'?), so it is refused with
    a hint; '-o sub/out.txt' runs."""
    (workspace / "sub").mkdir()
    glued = await command(workspace, "sort -osub/out.txt a.txt", mode)
    assert_refused(glued, "write a short option and its value as two words")
    assert not (workspace / "sub" / "out.txt").exists()
    apart = await command(workspace, "sort -o sub/out.txt a.txt", mode)
    assert apart.success
    assert (workspace / "sub" / "out.txt").read_text() == "a\nb\n"


async def test_values_after_equals_signs_and_at_signs_are_checked(
    workspace: Path, outside: Path, mode: Confinement
) -> None:
    """--opt=path, key=value=path and @response-file values are checked like plain words."""
    lines = [
        f"sort --output={outside}/x a.txt",
        "grep --file=../outside/secret.txt a.txt",
        "grep --file=dirlink/secret.txt a.txt",
        f"sort --define=key={outside}/x a.txt",
        "sort @../outside/secret.txt",
        f"sort @{outside}/secret.txt",
    ]
    await assert_all_refused(workspace, mode, lines, REFUSED)
    assert_untouched(outside)


async def test_writes_through_symlinks_are_refused(
    workspace: Path, outside: Path, mode: Confinement
) -> None:
    """A write through a linked directory or a (dangling) linked file, glued or not, is refused."""
    lines = [
        "sort -odirlink/new.txt a.txt",
        "sort -o dirlink/new.txt a.txt",
        "sort -odangling.txt a.txt",
        "sort --output=dangling.txt a.txt",
    ]
    await assert_all_refused(workspace, mode, lines, "through a symbolic link")
    assert_untouched(outside)


async def test_reads_through_symlinks_are_refused(
    workspace: Path, outside: Path, mode: Confinement
) -> None:
    """A read through a linked file or directory, glued or not, is refused."""
    lines = [
        "cat secret_link.txt",
        "head -n1 dirlink/secret.txt",
        "grep -fsecret_link.txt a.txt",
        "grep -fdirlink/secret.txt a.txt",
        "diff a.txt secret_link.txt",
    ]
    await assert_all_refused(workspace, mode, lines, "through a symbolic link")


async def test_recursive_programs_do_not_follow_links_out(
    workspace: Path, outside: Path, mode: Confinement
) -> None:
    """grep -R, ls -RL and diff -r never show what lies behind a link leading out."""
    (workspace / "left").mkdir()
    (workspace / "right").mkdir()
    (workspace / "left" / "up").symlink_to("../../outside")
    (workspace / "right" / "up").mkdir()
    (workspace / "right" / "up" / "secret.txt").write_text("other\n")
    for line in ("grep -R secret .", "grep -Rn top .", "ls -RL", "diff -r left right"):
        result = await command(workspace, line, mode)
        assert "top secret" not in result.output
        if mode is Confinement.OFF:  # nothing can confine what the program follows: refused
            assert_refused(result, "follow symbolic links", "does not confine commands")
    assert_untouched(outside)


async def test_ordinary_commands_inside_the_workspace_still_work(
    workspace: Path, mode: Confinement
) -> None:
    """Plain, glued and --opt=value paths inside the workspace, and links staying inside, work."""
    (workspace / "docs").mkdir()
    (workspace / "docs" / "b.txt").write_text("b\n")
    (workspace / "alias.txt").symlink_to(workspace / "a.txt")
    (workspace / "same").symlink_to("docs")
    expected = {
        "sort -o sorted.txt a.txt": "exit code 0\n(no output)",
        "sort -osorted2.txt a.txt": "exit code 0\n(no output)",
        "grep -fpatterns.txt a.txt": "exit code 0\na\n",
        "grep --file=patterns.txt alias.txt": "exit code 0\na\n",
        "grep -r b docs": "exit code 0\ndocs/b.txt:b\n",
        "cat same/b.txt": "exit code 0\nb\n",
        "ls -R docs": "exit code 0\ndocs:\nb.txt\n",
        'python3 -c \'open("made.txt", "w").write("made")\'': "exit code 0\n(no output)",
    }
    for line, output in expected.items():
        result = await command(workspace, line, mode)
        assert (result.success, result.output) == (True, output), line
    assert (workspace / "sorted.txt").read_text() == "a\nb\n"
    assert (workspace / "sorted2.txt").read_text() == "a\nb\n"
    assert (workspace / "made.txt").read_text() == "made"


# --------------------------------------------------------------------------------------------
# bubblewrap: what the program itself can reach
# --------------------------------------------------------------------------------------------


def python(code: str) -> str:
    return shlex.join(["python3", "-c", code])


@needs_bwrap
async def test_a_confined_program_sees_only_the_workspace_and_system_files(
    workspace: Path, outside: Path
) -> None:
    """Under bubblewrap an interpreter finds nothing outside: not the files beside the
    workspace, not the project, not the worker's processes."""
    code = (
        "import os; "
        f"print(os.path.exists({str(outside / 'secret.txt')!r}), os.path.exists({str(ROOT)!r}), "
        f"os.path.exists('/proc/{os.getpid()}/environ'), os.listdir('/tmp'))"
    )
    result = await command(workspace, python(code), Confinement.BWRAP)
    real = workspace.resolve()
    # /tmp is private and empty but for the way to the workspace, when that is under /tmp.
    tmp = [real.parts[2]] if real.parts[1] == "tmp" else []
    assert (result.success, result.output) == (True, f"exit code 0\nFalse False False {tmp}\n")
    unconfined = await command(workspace, python(code), Confinement.OFF)
    assert unconfined.output.startswith("exit code 0\nTrue True True")


@needs_bwrap
async def test_a_confined_program_cannot_write_outside_even_through_its_own_links(
    workspace: Path, outside: Path
) -> None:
    """A link the program makes at run time leads nowhere; system directories are read-only."""
    code = (
        "import os; "
        f"os.symlink({str(outside)!r}, 'made_link'); "
        "open('made_link/new.txt', 'w').write('x')"
    )
    result = await command(workspace, python(code), Confinement.BWRAP)
    assert_refused(result, "No such file or directory")
    system = await command(workspace, python("open('/etc/treadle-test', 'w')"), Confinement.BWRAP)
    assert_refused(system, "Read-only file system")
    assert not Path("/etc/treadle-test").exists()
    assert_untouched(outside)


@needs_bwrap
async def test_a_confined_program_gets_a_private_empty_home(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under bubblewrap $HOME is empty and writable, and what is written there is not the
    worker's home and is gone afterwards."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine example.com password hunter2\n")
    monkeypatch.setenv("HOME", str(home))
    code = (
        "import os; home = os.path.expanduser('~'); print(sorted(os.listdir(home))); "
        "open(os.path.join(home, 'cache'), 'w').write('x')"
    )
    result = await command(workspace, python(code), Confinement.BWRAP)
    assert (result.success, result.output) == (True, "exit code 0\n[]\n")
    assert sorted(p.name for p in home.iterdir()) == [".netrc"]


@needs_bwrap
async def test_a_confined_virtualenv_script_finds_its_interpreter_and_packages(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program installed in a virtualenv (a script whose interpreter links elsewhere) runs
    under bubblewrap with its packages."""
    venv_bin = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{venv_bin}{os.pathsep}{os.environ['PATH']}")
    policy = POLICY.model_copy(update={"command_allowlist": ("pytest",)})
    result = await command(workspace, "pytest --version", Confinement.BWRAP, policy)
    assert result.success, result.output
    assert result.output.startswith("exit code 0\npytest ")


@needs_bwrap
async def test_a_confined_program_has_no_network(workspace: Path) -> None:
    """Under bubblewrap a program cannot reach the worker's network, not even its loopback."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"
        result = await command(workspace, python(code), Confinement.BWRAP)
        assert_refused(result, "Connection refused")
        reached = await command(workspace, python(code), Confinement.OFF)
        assert reached.success


needs_root_and_bwrap = pytest.mark.skipif(
    os.geteuid() != 0 or not BWRAP_WORKS,
    reason="needs a worker running as root with bubblewrap (apt-get install bubblewrap)",
)


@needs_root_and_bwrap
async def test_a_root_workers_command_runs_as_an_unprivileged_user(workspace: Path) -> None:
    """The worker is root, the command is not: its uid, gid and groups are unprivileged, it
    has no capability, and root-only files (/etc/shadow) cannot be read, however it asks."""
    assert Path("/etc/shadow").exists()
    named = await command(workspace, "cat /etc/shadow", Confinement.BWRAP)
    assert_refused(named, REFUSED)
    code = (
        "import os; "
        "print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups()); "
        "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]); "
        "open('/etc/shadow').read()"
    )
    result = await command(workspace, python(code), Confinement.BWRAP)
    assert not result.success, result.output
    assert "PermissionError: [Errno 13] Permission denied: '/etc/shadow'" in result.output
    lines = result.output.splitlines()
    assert "65534 65534 65534 []" in lines  # uid, euid, gid, no supplementary groups
    assert "0000000000000000" in lines  # no effective capability
    shadow = python("print(len(open('/etc/shadow').read()) > 0)")
    unconfined = await command(workspace, shadow, Confinement.OFF)
    assert unconfined.success  # argument checks alone do not stop it: the sandbox does


@needs_root_and_bwrap
async def test_a_root_workers_command_still_works_in_the_workspace(workspace: Path) -> None:
    """The unprivileged command edits a file the root worker wrote and makes a new one in a
    workspace the root worker made; the worker reads both, and the workspace directory stays
    root's (git run by the worker trusts a repository only its own user owns)."""
    assert workspace.stat().st_uid == 0
    (workspace / "sub").mkdir()
    code = (
        "open('a.txt', 'a').write('c\\n'); open('sub/new.txt', 'w').write('made\\n'); "
        "import os; print(os.getuid())"
    )
    result = await command(workspace, python(code), Confinement.BWRAP)
    assert (result.success, result.output) == (True, "exit code 0\n65534\n")
    assert (workspace / "a.txt").read_text() == "b\na\nc\n"
    assert (workspace / "sub" / "new.txt").read_text() == "made\n"
    assert (workspace / "sub" / "new.txt").stat().st_uid == 65534
    assert workspace.stat().st_uid == 0
    (workspace / "sub" / "new.txt").write_text("the worker writes it too\n")


# --------------------------------------------------------------------------------------------
# Choosing the confinement
# --------------------------------------------------------------------------------------------


@pytest.fixture
def path_without_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker PATH with the allowed programs and no bwrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("grep", "python3"):
        found = shutil.which(name)
        assert found is not None
        (bin_dir / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))


@pytest.mark.usefixtures("path_without_bwrap")
async def test_auto_falls_back_to_argument_checks_and_says_so_once(
    workspace: Path, outside: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without bubblewrap, auto runs commands with argument checks only and warns once."""
    with caplog.at_level(logging.WARNING):
        ran = await command(workspace, "grep -r a .", Confinement.AUTO)
        refused = await command(workspace, "grep -R secret .", Confinement.AUTO)
    assert ran.success
    assert_refused(refused, "does not confine commands")
    warnings = [
        r.getMessage() for r in caplog.records if "tool.command_confinement" in r.getMessage()
    ]
    assert len(warnings) == 1
    assert "confined=false" in warnings[0]
    assert "bwrap (bubblewrap) is not installed" in warnings[0]


@pytest.mark.usefixtures("path_without_bwrap")
async def test_required_bwrap_refuses_commands_where_it_does_not_work(workspace: Path) -> None:
    """A worker that requires bubblewrap refuses every command where it is missing."""
    result = await command(workspace, "grep -r a .", Confinement.BWRAP)
    assert result == ToolResult(
        success=False,
        output="ERROR: this worker must confine commands with bubblewrap, which does not work "
        "here: bwrap (bubblewrap) is not installed",
    )


# --------------------------------------------------------------------------------------------
# Processes die with the command, the worker and the attempt
# --------------------------------------------------------------------------------------------


async def test_processes_that_leave_the_group_die_with_the_command(
    workspace: Path, mode: Confinement
) -> None:
    """A child that made itself a new session (a daemon) is killed when the command ends."""
    word = marker()
    child = "import os, time; os.setsid(); print('daemon up', flush=True); time.sleep(60)"
    code = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}, {word!r}]); time.sleep(1)"
    )
    result = await command(workspace, shlex.join(["python3", "-c", code, word]), mode)
    assert (result.success, result.output) == (True, "exit code 0\ndaemon up\n")
    assert gone_within(pids_with(word), seconds=5)


STAND_IN_WORKER = """
import asyncio, json, sys
from pathlib import Path
from treadle.activities.tools.builtin import Confinement, execute_tool
from treadle.workflows.agent.messages.models import ToolPolicy

policy = ToolPolicy(allow_run_command=True, command_allowlist=("python3",))
asyncio.run(execute_tool(
    Path(sys.argv[1]), "run_command", json.dumps({"command": sys.argv[2]}), policy,
    confinement=Confinement(sys.argv[3]),
))
"""


async def test_the_command_dies_with_the_process_that_started_it(
    workspace: Path, mode: Confinement
) -> None:
    """SIGKILL to the process running run_command kills the command too (parent-death signal;
    under bubblewrap, everything the command started)."""
    first, second = marker(), marker()
    child = "import time; time.sleep(60)"
    code = (
        "import pathlib, subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}, {second!r}]); "
        "pathlib.Path('up').touch(); time.sleep(60)"
    )
    line = shlex.join(["python3", "-c", code, first])
    worker = subprocess.Popen(
        [sys.executable, "-c", STAND_IN_WORKER, str(workspace), line, mode.value], cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 30
        while not (workspace / "up").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        command_pids, child_pids = pids_with(first), pids_with(second)
        assert command_pids
        assert child_pids
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert gone_within(command_pids, seconds=5)
        if mode is Confinement.BWRAP:
            assert gone_within(child_pids, seconds=5)
    finally:
        worker.kill()
        worker.wait()
        for pid in pids_with(first) | pids_with(second):
            os.kill(pid, signal.SIGKILL)


def activity_env(attempt: int) -> ActivityEnvironment:
    """An activity context for attempt ``attempt`` of one and the same activity."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt, workflow_id="wf-leftovers")
    return env


SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes] | int]]:
    """Processes (or pids) standing in for what an earlier attempt left; killed afterwards."""
    started: list[subprocess.Popen[bytes] | int] = []
    yield started
    for item in started:
        if isinstance(item, int):
            with contextlib.suppress(ProcessLookupError):
                os.kill(item, signal.SIGKILL)
        else:
            item.kill()
            item.wait()


async def start_group(
    env: dict[str, str], sleepers: list[subprocess.Popen[bytes] | int]
) -> tuple[int, int]:
    """A new process group: a leader with ``env`` and a member that cleared its environment
    (``env={}``); returns (leader, member)."""
    word = marker()
    code = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {word!r}], "
        "env={}); time.sleep(60)"
    )
    leader = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    sleepers.append(leader)
    deadline = time.monotonic() + 60  # a watchdog against a hang, not a measured duration
    # One process with the word: a busy machine may show a fork between its fork and its exec.
    while len(found := pids_with(word) - {leader.pid}) != 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    (member,) = found
    sleepers.append(member)
    return leader.pid, member


def started(env: dict[str, str], sleepers: list[subprocess.Popen[bytes] | int]) -> int:
    process = subprocess.Popen(SLEEP, env=env, start_new_session=True)
    sleepers.append(process)
    return process.pid


def alive(pid: int) -> bool:
    return not gone_within({pid}, seconds=0)


def command_call(workspace: Path, line: str) -> ToolRequest:
    return ToolRequest(
        call=ToolCall(id="c", name="run_command", arguments=json.dumps({"command": line})),
        workspace=str(workspace),
        policy=POLICY,
    )


async def test_a_retried_attempt_kills_what_an_earlier_attempt_left(
    workspace: Path, sleepers: list[subprocess.Popen[bytes] | int]
) -> None:
    """Before attempt 2 runs its command, the processes of attempt 1 still in its recorded group
    or carrying its mark are killed; unrelated processes are not."""
    mark = activity_env(attempt=1).run(processes.mark_this_attempt)
    marked = {**os.environ, processes.MARK_VARIABLE: mark.token}
    leader, member = await start_group(marked, sleepers)  # the member lost the mark
    daemon = started(marked, sleepers)  # kept the mark, left the group (setsid)
    unrelated = started(dict(os.environ), sleepers)
    activity_env(attempt=1).run(processes.record_group, mark, leader)

    # The new attempt's command itself checks that the leftovers are dead (or zombies not yet
    # reaped) when it runs: one copy at a time.
    check = (
        "import pathlib, sys; "
        "states = [pathlib.Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] "
        f"for pid in {[leader, member, daemon]!r} if pathlib.Path(f'/proc/{{pid}}').exists()]; "
        "sys.exit(0 if set(states) <= {'Z', 'X'} else 1)"
    )
    tools = ToolActivities(confinement=Confinement.OFF)  # the check reads the host's /proc
    result = await activity_env(attempt=2).run(
        tools.run_tool, command_call(workspace, python(check))
    )

    assert (result.success, result.output) == (True, "exit code 0\n(no output)")
    assert alive(unrelated)
    assert mark.record is not None and not mark.record.exists()


async def test_a_first_attempt_kills_nothing_it_did_not_start(
    workspace: Path, sleepers: list[subprocess.Popen[bytes] | int]
) -> None:
    """Attempt 1 has no earlier attempt: a recorded group is not touched before it runs."""
    mark = activity_env(attempt=1).run(processes.mark_this_attempt)
    leader, member = await start_group(dict(os.environ), sleepers)
    activity_env(attempt=1).run(processes.record_group, mark, leader)
    result = await activity_env(attempt=1).run(
        ToolActivities().run_tool, command_call(workspace, "python3 -c pass")
    )
    assert result.success
    assert alive(leader) and alive(member)


async def test_a_group_id_now_used_by_another_process_is_left_alone(
    workspace: Path, sleepers: list[subprocess.Popen[bytes] | int]
) -> None:
    """A record whose group leader's start time no longer matches (the id was reused) kills
    nothing of that group."""
    mark = activity_env(attempt=1).run(processes.mark_this_attempt)
    leader, member = await start_group(dict(os.environ), sleepers)
    activity_env(attempt=1).run(processes.record_group, mark, leader)
    assert mark.record is not None
    record = json.loads(mark.record.read_text())
    mark.record.write_text(json.dumps({**record, "start": record["start"] - 1}))

    result = await activity_env(attempt=2).run(
        ToolActivities().run_tool, command_call(workspace, "python3 -c pass")
    )

    assert result.success
    assert alive(leader) and alive(member)
