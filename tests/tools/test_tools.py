"""The tools: what each one does, how paths are confined, and how failures become data."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import shlex
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from tests.support.commands import gone_within, marker, pids_with
from tests.support.hand_offs import hand_offs
from treadle.activities import heartbeat
from treadle.activities.errors import WorkspaceEscapeError
from treadle.activities.tools.builtin import (
    ToolActivities,
    cap_output,
    command_environment,
    execute_tool,
)
from treadle.activities.tools.workspace import relative, resolve
from treadle.workflows.agent.messages.models import ToolCall, ToolPolicy, ToolRequest, ToolResult

POLICY = ToolPolicy()
COMMANDS = ToolPolicy(
    allow_run_command=True,
    command_allowlist=("cat", "echo", "grep", "python3", "sleep", "touch"),
    command_timeout_seconds=30,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a file no tool may read or change."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret\n")
    return path


async def run(
    workspace: Path, tool: str, policy: ToolPolicy = POLICY, **arguments: Any
) -> ToolResult:
    return await execute_tool(workspace, tool, json.dumps(arguments), policy)


def sha(text: str) -> str:
    """The content hash write_file / edit_file report, for progress tracking."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def assert_refused(result: ToolResult, *fragments: str) -> None:
    assert not result.success
    assert result.output.startswith("ERROR: ")
    for fragment in fragments:
        assert fragment in result.output


# --------------------------------------------------------------------------------------------
# read_file
# --------------------------------------------------------------------------------------------


async def test_read_file_returns_the_whole_text(workspace: Path) -> None:
    """read_file returns a text file's content unchanged."""
    (workspace / "main.py").write_text("print('hi')\nprint('bye')\n")
    result = await run(workspace, "read_file", path="main.py")
    assert result == ToolResult(success=True, output="print('hi')\nprint('bye')\n")


async def test_read_file_returns_a_line_range(workspace: Path) -> None:
    """read_file with offset and limit returns those lines under a header saying where to go on."""
    (workspace / "log.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    result = await run(workspace, "read_file", path="log.txt", offset=3, limit=2)
    assert result.success
    assert result.output == (
        "[lines 3-4 of 10 in log.txt; continue with offset=5]\nline 3\nline 4\n"
    )


async def test_read_file_says_when_the_file_is_empty(workspace: Path) -> None:
    """read_file of an empty file says so instead of returning nothing."""
    (workspace / "empty.txt").write_text("")
    result = await run(workspace, "read_file", path="empty.txt")
    assert result == ToolResult(success=True, output="empty.txt is empty")


async def test_read_file_of_a_missing_file_is_an_error(workspace: Path) -> None:
    """read_file of a file that does not exist is an ERROR observation naming it."""
    result = await run(workspace, "read_file", path="nope.py")
    assert result == ToolResult(success=False, output="ERROR: nope.py does not exist")


async def test_read_file_refuses_a_directory(workspace: Path) -> None:
    """read_file of a directory is an ERROR pointing at list_dir."""
    (workspace / "src").mkdir()
    assert_refused(await run(workspace, "read_file", path="src"), "src is a directory", "list_dir")


async def test_read_file_refuses_binary_and_non_utf8_files(workspace: Path) -> None:
    """read_file refuses files with NUL bytes and files that are not UTF-8."""
    (workspace / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (workspace / "latin1.txt").write_bytes("café".encode("latin-1"))
    assert_refused(await run(workspace, "read_file", path="image.png"), "binary file")
    assert_refused(await run(workspace, "read_file", path="latin1.txt"), "not UTF-8 text")


async def test_read_file_offset_past_the_end_is_an_error(workspace: Path) -> None:
    """read_file with an offset beyond the last line says how many lines there are."""
    (workspace / "a.txt").write_text("one\ntwo\n")
    result = await run(workspace, "read_file", path="a.txt", offset=5)
    assert_refused(result, "offset 5 is past the end of a.txt (2 lines)")


async def test_output_is_capped_with_a_note(workspace: Path) -> None:
    """Output longer than max_output_chars is cut, with a note saying how much was cut."""
    (workspace / "big.txt").write_text("x" * 1000)
    result = await run(workspace, "read_file", ToolPolicy(max_output_chars=100), path="big.txt")
    assert result.output == "x" * 100 + "\n[... 900 more characters cut]"


def test_cap_output_leaves_short_text_alone() -> None:
    """cap_output returns text within the limit unchanged."""
    assert cap_output("short", 10) == "short"


# --------------------------------------------------------------------------------------------
# write_file and edit_file
# --------------------------------------------------------------------------------------------


async def test_write_file_creates_parents_and_reports_the_path(workspace: Path) -> None:
    """write_file creates missing parent directories and reports bytes written and the path."""
    result = await run(workspace, "write_file", path="docs/notes.md", content="héllo\n")
    assert result == ToolResult(
        success=True,
        output="wrote 7 bytes to docs/notes.md",
        mutated_paths=("docs/notes.md",),
        content_hashes={"docs/notes.md": sha("héllo\n")},
    )
    assert (workspace / "docs" / "notes.md").read_text() == "héllo\n"


async def test_each_file_tool_call_is_one_hand_off_to_a_thread(tmp_path: Path) -> None:
    """A file tool's call hands its work to a thread once, the workspace made in the same
    hand-off (each hand-off wakes a thread and then the worker's event loop); the first call
    makes the workspace."""
    workspace = tmp_path / "new"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "a/notes.txt", "content": "one\ntwo\n"}),
        ("read_file", {"path": "a/notes.txt"}),
        ("edit_file", {"path": "a/notes.txt", "old_text": "two", "new_text": "three"}),
        ("list_dir", {"path": "a"}),
        ("search_files", {"pattern": "three"}),
    ]
    for tool, arguments in calls:
        with hand_offs() as counted:
            result = await run(workspace, tool, **arguments)
        assert result.success, result.output
        assert counted == ["_in_workspace"], tool
    assert (workspace / "a" / "notes.txt").read_text() == "one\nthree\n"


async def test_write_file_replaces_atomically_and_keeps_the_mode(workspace: Path) -> None:
    """write_file replaces an existing file, keeps its permissions and leaves no temp file."""
    script = workspace / "run.sh"
    script.write_text("old\n")
    script.chmod(0o755)
    result = await run(workspace, "write_file", path="run.sh", content="new\n")
    assert result.success
    assert script.read_text() == "new\n"
    assert script.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in workspace.iterdir()) == ["run.sh"]


async def test_write_file_reports_the_normalised_path(workspace: Path) -> None:
    """A path that stays inside through '..' is allowed and reported in normal form."""
    result = await run(workspace, "write_file", path="a/../b.txt", content="b")
    assert result.mutated_paths == ("b.txt",)
    assert (workspace / "b.txt").read_text() == "b"


async def test_edit_file_replaces_the_unique_occurrence(workspace: Path) -> None:
    """edit_file replaces exactly one occurrence and says on which line."""
    (workspace / "main.py").write_text("a = 1\nb = 2\nc = 3\n")
    result = await run(workspace, "edit_file", path="main.py", old_text="b = 2", new_text="b = 20")
    assert result == ToolResult(
        success=True,
        output="edited main.py: replaced 1 occurrence at line 2",
        mutated_paths=("main.py",),
        content_hashes={"main.py": sha("a = 1\nb = 20\nc = 3\n")},
    )
    assert (workspace / "main.py").read_text() == "a = 1\nb = 20\nc = 3\n"


async def test_edit_file_missing_old_text_is_an_error(workspace: Path) -> None:
    """edit_file with old_text that is not in the file is an ERROR and changes nothing."""
    (workspace / "main.py").write_text("a = 1\n")
    result = await run(workspace, "edit_file", path="main.py", old_text="zzz", new_text="y")
    assert result == ToolResult(success=False, output="ERROR: old_text not found in main.py")
    assert (workspace / "main.py").read_text() == "a = 1\n"


async def test_edit_file_non_unique_old_text_is_an_error(workspace: Path) -> None:
    """edit_file with old_text occurring several times asks for more context, changes nothing."""
    (workspace / "main.py").write_text("x\nx\nx\n")
    result = await run(workspace, "edit_file", path="main.py", old_text="x", new_text="y")
    assert result == ToolResult(
        success=False,
        output="ERROR: old_text occurs 3 times in main.py; include more context so it is unique",
    )
    assert (workspace / "main.py").read_text() == "x\nx\nx\n"


async def test_edit_file_counts_overlapping_occurrences(workspace: Path) -> None:
    """Overlapping occurrences ('aa' in 'aaa') count as ambiguous, not as one."""
    (workspace / "a.txt").write_text("aaa")
    result = await run(workspace, "edit_file", path="a.txt", old_text="aa", new_text="b")
    assert_refused(result, "occurs 2 times")


# --------------------------------------------------------------------------------------------
# list_dir and search_files
# --------------------------------------------------------------------------------------------


async def test_list_dir_lists_sorted_entries(workspace: Path) -> None:
    """list_dir lists entries by name, directories with '/', files with their size."""
    (workspace / "src").mkdir()
    (workspace / "b.txt").write_text("12345")
    (workspace / "a.txt").write_text("")
    result = await run(workspace, "list_dir")
    assert result == ToolResult(success=True, output="a.txt  (0 bytes)\nb.txt  (5 bytes)\nsrc/")


async def test_list_dir_says_when_empty(workspace: Path) -> None:
    """list_dir of an empty directory says it is empty."""
    (workspace / "src").mkdir()
    assert (await run(workspace, "list_dir")).output == "src/"
    assert (await run(workspace, "list_dir", path="src")).output == "src is an empty directory"


async def test_list_dir_of_a_file_is_an_error(workspace: Path) -> None:
    """list_dir of a file is an ERROR pointing at read_file."""
    (workspace / "a.txt").write_text("a")
    assert_refused(await run(workspace, "list_dir", path="a.txt"), "a.txt is not a directory")


async def test_search_files_finds_text_with_paths_and_line_numbers(workspace: Path) -> None:
    """search_files reports 'path:line: text' for each match, in path order."""
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("import os\nTODO: fix\n")
    (workspace / "b.md").write_text("nothing\nalso TODO\n")
    result = await run(workspace, "search_files", pattern="TODO")
    assert result == ToolResult(success=True, output="b.md:2: also TODO\nsrc/a.py:2: TODO: fix")


async def test_search_files_with_regex(workspace: Path) -> None:
    """search_files with regex=True matches a regular expression."""
    (workspace / "a.py").write_text("def f():\ndef g():\nx = 1\n")
    result = await run(workspace, "search_files", pattern=r"^def \w\(", regex=True)
    assert result.output == "a.py:1: def f():\na.py:2: def g():"


async def test_search_files_skips_binary_large_and_git_files(workspace: Path) -> None:
    """search_files ignores binary files, files over 1 MiB and .git directories."""
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("needle\n")
    (workspace / "blob.bin").write_bytes(b"needle\x00\x01")
    (workspace / "huge.txt").write_text("needle\n" + "x" * (1024 * 1024))
    (workspace / "ok.txt").write_text("needle\n")
    result = await run(workspace, "search_files", pattern="needle")
    assert result.output == "ok.txt:1: needle"


async def test_search_files_says_no_matches(workspace: Path) -> None:
    """search_files with nothing found says 'no matches'."""
    (workspace / "a.txt").write_text("hello\n")
    result = await run(workspace, "search_files", pattern="absent")
    assert result == ToolResult(success=True, output="no matches for 'absent' in .")


async def test_search_files_notes_capped_results(workspace: Path) -> None:
    """search_files stops at max_results and says the results were capped."""
    (workspace / "a.txt").write_text("hit\n" * 10)
    result = await run(workspace, "search_files", pattern="hit", max_results=3)
    assert result.output.splitlines() == [
        "a.txt:1: hit",
        "a.txt:2: hit",
        "a.txt:3: hit",
        "[results capped at 3 matches; narrow the pattern or the path]",
    ]


async def test_search_files_invalid_regex_is_an_error(workspace: Path) -> None:
    """An invalid regular expression is an ERROR observation, not a crash."""
    result = await run(workspace, "search_files", pattern="(unclosed", regex=True)
    assert_refused(result, "invalid regular expression '(unclosed'")


# --------------------------------------------------------------------------------------------
# Workspace confinement
# --------------------------------------------------------------------------------------------


async def test_absolute_paths_are_refused(workspace: Path, outside: Path) -> None:
    """Absolute paths are refused outright, for reading and for writing."""
    result = await run(workspace, "read_file", path="/etc/passwd")
    assert result == ToolResult(
        success=False,
        output="ERROR: path '/etc/passwd' is absolute; use a path relative to the workspace",
    )
    target = outside / "new.txt"
    assert_refused(await run(workspace, "write_file", path=str(target), content="x"), "absolute")
    assert not target.exists()


async def test_dot_dot_out_of_the_workspace_is_refused(workspace: Path, outside: Path) -> None:
    """'../outside' and 'a/../../outside' are refused; nothing is read or written outside."""
    read = await run(workspace, "read_file", path="../outside/secret.txt")
    assert_refused(read, "'..'", "outside the workspace")
    assert "top secret" not in read.output
    for path in ("../outside/new.txt", "a/../../outside/new.txt"):
        assert_refused(await run(workspace, "write_file", path=path, content="x"), "'..'")
    assert not (outside / "new.txt").exists()
    assert not (workspace / "a").exists()


async def test_symlinked_directory_leading_out_is_refused(workspace: Path, outside: Path) -> None:
    """Reads, writes, edits and listings through a link to an outside directory are refused."""
    (workspace / "link").symlink_to(outside)
    read = await run(workspace, "read_file", path="link/secret.txt")
    assert_refused(read, "symbolic link")
    assert "top secret" not in read.output
    assert_refused(await run(workspace, "write_file", path="link/new.txt", content="x"))
    assert_refused(await run(workspace, "write_file", path="link/sub/new.txt", content="x"))
    edit = await run(workspace, "edit_file", path="link/secret.txt", old_text="top", new_text="x")
    assert_refused(edit)
    assert_refused(await run(workspace, "list_dir", path="link"))
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_symlinked_file_leading_out_is_refused(workspace: Path, outside: Path) -> None:
    """A link whose final component points outside can be neither read nor overwritten."""
    (workspace / "notes.txt").symlink_to(outside / "secret.txt")
    assert_refused(await run(workspace, "read_file", path="notes.txt"), "symbolic link")
    assert_refused(await run(workspace, "write_file", path="notes.txt", content="pwned"))
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_dangling_symlink_leading_out_is_refused(workspace: Path, outside: Path) -> None:
    """Writing through a dangling link to an outside path does not create the outside file."""
    (workspace / "new.txt").symlink_to(outside / "created.txt")
    assert_refused(await run(workspace, "write_file", path="new.txt", content="x"))
    assert not (outside / "created.txt").exists()


async def test_listing_and_search_never_show_outside_content(
    workspace: Path, outside: Path
) -> None:
    """list_dir shows an outside link without its target; search_files does not follow it."""
    (workspace / "link").symlink_to(outside)
    (workspace / "secret_link.txt").symlink_to(outside / "secret.txt")
    listing = await run(workspace, "list_dir")
    assert listing.output == "link -> (outside workspace)\nsecret_link.txt -> (outside workspace)"
    search = await run(workspace, "search_files", pattern="secret")
    assert search.output == "no matches for 'secret' in ."


async def test_search_files_follows_no_link(workspace: Path, outside: Path) -> None:
    """search_files enters no linked directory and reads no linked file (as grep -r): a nested
    relative link out finds nothing, and a file linked from inside is reported once, by its
    real name."""
    (workspace / "sub").mkdir()
    (workspace / "sub" / "up").symlink_to("../../outside")
    (workspace / "sub" / "up_file.txt").symlink_to("../../outside/secret.txt")
    (workspace / "notes.txt").write_text("top notes\n")
    (workspace / "alias.txt").symlink_to("notes.txt")
    (workspace / "docs").symlink_to("sub")
    result = await run(workspace, "search_files", pattern="top")
    assert result == ToolResult(success=True, output="notes.txt:1: top notes")
    assert (await run(workspace, "search_files", pattern="top", path="docs")).output == (
        "no matches for 'top' in sub"
    )
    listing = await run(workspace, "list_dir", path="sub")
    assert listing.output == "up -> (outside workspace)\nup_file.txt -> (outside workspace)"


async def test_symlinks_that_stay_inside_are_allowed(workspace: Path) -> None:
    """A link to a directory inside the workspace can be used and is listed with its target."""
    (workspace / "docs").mkdir()
    (workspace / "docs" / "a.txt").write_text("inside\n")
    (workspace / "alias").symlink_to(workspace / "docs")
    assert (await run(workspace, "read_file", path="alias/a.txt")).output == "inside\n"
    assert (await run(workspace, "list_dir")).output == "alias -> docs/\ndocs/"


def test_resolve_maps_empty_and_dot_to_the_root(workspace: Path) -> None:
    """'' and '.' both resolve to the workspace's real path."""
    assert resolve(workspace, "") == workspace.resolve()
    assert resolve(workspace, ".") == workspace.resolve()
    assert relative(workspace, resolve(workspace, "")) == "."


def test_workspace_reached_through_a_symlink_is_fine(tmp_path: Path, workspace: Path) -> None:
    """A workspace given as a link resolves paths against its real directory."""
    link = tmp_path / "ws-link"
    link.symlink_to(workspace)
    assert resolve(link, "a/b.txt") == workspace.resolve() / "a" / "b.txt"
    with pytest.raises(WorkspaceEscapeError, match=r"uses '\.\.' to lead outside"):
        resolve(link, "../outside")


# --------------------------------------------------------------------------------------------
# run_command
# --------------------------------------------------------------------------------------------


async def test_run_command_hashes_its_output_for_progress_tracking(workspace: Path) -> None:
    """The same command printing the same output hashes the same; other output does not."""
    first = await run(workspace, "run_command", COMMANDS, command="echo one")
    again = await run(workspace, "run_command", COMMANDS, command="echo one")
    other = await run(workspace, "run_command", COMMANDS, command="echo two")
    assert list(first.content_hashes) == ["echo one"]
    assert first.content_hashes == again.content_hashes
    assert other.content_hashes["echo two"] != first.content_hashes["echo one"]


async def test_run_command_runs_in_the_workspace_without_a_shell(workspace: Path) -> None:
    """run_command runs the program in the workspace, passing '|' through as a plain word."""
    result = await run(workspace, "run_command", COMMANDS, command="echo hi | wc")
    assert (result.success, result.output) == (True, "exit code 0\nhi | wc\n")
    cwd = await run(
        workspace, "run_command", COMMANDS, command="python3 -c 'import os; print(os.getcwd())'"
    )
    assert cwd.output == f"exit code 0\n{workspace.resolve()}\n"


async def test_run_command_non_zero_exit_is_an_error(workspace: Path) -> None:
    """A non-zero exit code is an ERROR carrying the code and the output."""
    command = "python3 -c 'import sys; print(\"bad\"); sys.exit(3)'"
    result = await run(workspace, "run_command", COMMANDS, command=command)
    assert result == ToolResult(success=False, output="ERROR: command exited with code 3\nbad\n")


async def test_run_command_is_refused_unless_allowed(workspace: Path) -> None:
    """run_command is an ERROR when the policy does not allow commands."""
    result = await run(workspace, "run_command", command="echo hi")
    assert_refused(result, "not allowed", "allow_run_command")


async def test_run_command_refuses_programs_not_in_the_allowlist(workspace: Path) -> None:
    """Only programs named exactly in the allowlist run; paths to allowed names do not."""
    for command in ("rm -rf .", "/bin/echo hi", "./echo hi"):
        result = await run(workspace, "run_command", COMMANDS, command=command)
        assert_refused(result, "is not allowed; allowed programs:")


def _parent_and_child(word: str, *, then: str = "time.sleep(3600)") -> str:
    """A command whose child prints 'child up' and sleeps (for longer than any test waits: a
    command awaited instead of killed hangs the test); both carry ``word`` to be found."""
    child = "import time; print('child up', flush=True); time.sleep(3600)"
    parent = (
        "import pathlib, subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}, {word!r}]); {then}"
    )
    return shlex.join(["python3", "-c", parent, word])


async def test_run_command_timeout_kills_the_process_group(workspace: Path) -> None:
    """On timeout the command and its children are killed and the partial output returned."""
    word = marker()
    command = _parent_and_child(word)
    # 10 s: long enough for two Pythons to start and print on a loaded machine. The command
    # and its child sleep an hour: a result at all says they were killed, not awaited (a
    # watchdog fails a hang).
    result = await asyncio.wait_for(
        run(workspace, "run_command", COMMANDS, command=command, timeout_seconds=10), 300
    )
    assert_refused(result, "command timed out after 10s; output so far:", "child up")
    assert gone_within(pids_with(word), seconds=30)  # a watchdog, returns once they are gone


async def test_run_command_environment_has_no_secrets(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """API keys, tokens and passwords in the worker's environment never reach a command."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-must-not-leak")
    command = "python3 -c 'import os; print(os.environ.get(\"OPENAI_API_KEY\"))'"
    result = await run(workspace, "run_command", COMMANDS, command=command)
    assert (result.success, result.output) == (True, "exit code 0\nNone\n")
    env = command_environment(
        {"PATH": "/bin", "LC_ALL": "C", "OPENAI_API_KEY": "k", "DB_PASSWORD": "p", "OTHER": "o"}
    )
    assert env == {"PATH": "/bin", "LC_ALL": "C"}


async def test_run_command_output_is_capped(workspace: Path) -> None:
    """A command's flood of output is cut to max_output_chars with an exact count of the rest."""
    policy = COMMANDS.model_copy(update={"max_output_chars": 200})
    result = await run(workspace, "run_command", policy, command="python3 -c 'print(\"x\" * 5000)'")
    assert result.success
    assert (
        result.output == ("exit code 0\n" + "x" * 5000)[:200] + "\n[... 4813 more characters cut]"
    )


async def test_run_command_refuses_absolute_path_arguments(workspace: Path) -> None:
    """An absolute path argument is refused before the command starts, so nothing runs."""
    result = await run(workspace, "run_command", COMMANDS, command="cat /etc/hostname")
    assert result == ToolResult(
        success=False,
        output="ERROR: argument '/etc/hostname' leads outside the workspace; "
        "commands may only use workspace-relative paths",
    )
    touch = await run(workspace, "run_command", COMMANDS, command="touch made.txt /tmp/x ~/y")
    assert_refused(touch, "'/tmp/x' leads outside the workspace")
    assert not (workspace / "made.txt").exists()
    assert_refused(await run(workspace, "run_command", COMMANDS, command="cat ~/.bashrc"), "'~")


async def test_run_command_refuses_dot_dot_arguments(workspace: Path, outside: Path) -> None:
    """An argument with a '..' segment is refused, and the outside file is not read."""
    for command in ("cat ../outside/secret.txt", "cat a/../../outside/secret.txt"):
        result = await run(workspace, "run_command", COMMANDS, command=command)
        assert_refused(result, "leads outside the workspace")
        assert "top secret" not in result.output


async def test_run_command_refuses_paths_in_option_values(workspace: Path) -> None:
    """The value of '--opt=value' is checked like a plain argument."""
    (workspace / "notes.txt").write_text("root\n")
    for command in ("grep --file=/etc/passwd notes.txt", "grep --file=../x/y notes.txt"):
        result = await run(workspace, "run_command", COMMANDS, command=command)
        assert_refused(result, "argument '--file=", "leads outside the workspace")


async def test_run_command_cannot_read_the_worker_environment(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'cat /proc/self/environ' is refused, so the worker's API key cannot be read through it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    for command in ("cat /proc/self/environ", f"cat /proc/{os.getpid()}/environ"):
        result = await run(workspace, "run_command", COMMANDS, command=command)
        assert_refused(result, "leads outside the workspace")
        assert "sk-must-not-leak" not in result.output


async def test_run_command_refuses_symlinks_leading_out(workspace: Path, outside: Path) -> None:
    """An argument that reaches outside through a link in the workspace is refused."""
    (workspace / "notes.txt").symlink_to(outside / "secret.txt")
    (workspace / "link").symlink_to(outside)
    for command in ("cat notes.txt", "cat link/secret.txt", "touch link/new.txt"):
        result = await run(workspace, "run_command", COMMANDS, command=command)
        assert_refused(result, "leads outside the workspace through a symbolic link")
        assert "top secret" not in result.output
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


async def test_run_command_accepts_workspace_relative_arguments(workspace: Path) -> None:
    """Relative paths inside the workspace, and links that stay inside, still work."""
    (workspace / "notes.txt").write_text("hello\n")
    (workspace / "alias.txt").symlink_to(workspace / "notes.txt")
    result = await run(workspace, "run_command", COMMANDS, command="cat notes.txt alias.txt")
    assert (result.success, result.output) == (True, "exit code 0\nhello\nhello\n")


# --------------------------------------------------------------------------------------------
# The activity boundary
# --------------------------------------------------------------------------------------------


def request(workspace: Path, name: str, arguments: str) -> ToolRequest:
    return ToolRequest(
        call=ToolCall(id="call-1", name=name, arguments=arguments), workspace=str(workspace)
    )


async def test_activity_creates_the_workspace_and_runs_the_tool(tmp_path: Path) -> None:
    """run_tool creates a missing workspace directory, then runs the call."""
    workspace = tmp_path / "new" / "ws"
    arguments = json.dumps({"path": "a.txt", "content": "hi"})
    result = await ToolActivities().run_tool(request(workspace, "write_file", arguments))
    assert result == ToolResult(
        success=True,
        output="wrote 2 bytes to a.txt",
        mutated_paths=("a.txt",),
        content_hashes={"a.txt": sha("hi")},
    )
    assert (workspace / "a.txt").read_text() == "hi"


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("read_file", "{not json", "ERROR: arguments for read_file are not valid JSON"),
        ("read_file", '{"path": 5}', "ERROR: arguments for read_file do not match its schema"),
        ("read_file", '{"path": "a", "x": 1}', "ERROR: arguments for read_file do not match"),
        ("delete_everything", "{}", "ERROR: unknown tool 'delete_everything'"),
    ],
)
async def test_activity_turns_bad_calls_into_errors(
    workspace: Path, name: str, arguments: str, message: str
) -> None:
    """Invalid JSON, schema-failing arguments and unknown tools are ERROR results, not raises."""
    result = await ToolActivities().run_tool(request(workspace, name, arguments))
    assert not result.success
    assert result.output.startswith(message)
    assert not os.listdir(workspace)


async def test_run_command_heartbeats_while_waiting(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside an activity, a command is marked sent before it starts (a command is not safe to
    repeat), then heartbeats while it runs so a dead worker is noticed early; every beat names
    the call, so a retried attempt finds the mark whichever beat came last."""
    monkeypatch.setattr(heartbeat, "DEFAULT_INTERVAL_SECONDS", 0.1)
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    call = request(
        workspace,
        "run_command",
        json.dumps({"command": "python3 -c 'import time; time.sleep(0.5)'"}),
    )
    call = call.model_copy(update={"policy": COMMANDS})
    result = await env.run(ToolActivities().run_tool, call)
    assert result.success
    mark = {"treadle_sent": call.call.id}
    assert beats[0] == (mark,)
    assert len(beats) > 1
    assert all(
        beat[0] == mark and str(beat[1]).startswith("python3 running for") for beat in beats[1:]
    )


async def test_heartbeat_interval_follows_the_heartbeat_timeout(workspace: Path) -> None:
    """With a 1.5 s heartbeat timeout a command heartbeats every 0.5 s, not every 5 s (a 3 s
    command: at least 3 beats after the first second, where a 5 s interval would send one)."""
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=1.5))
    env.on_heartbeat = lambda *details: beats.append(details)
    call = request(workspace, "run_command", json.dumps({"command": "sleep 3"}))
    result = await env.run(ToolActivities().run_tool, call.model_copy(update={"policy": COMMANDS}))
    assert result.success
    assert len(beats) >= 3


async def test_a_block_shorter_than_the_first_beat_sends_no_heartbeat() -> None:
    """Most model calls and every file tool end before the first beat (two thirds of the
    heartbeat timeout into the attempt): they send none; a longer block beats."""
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=1.5))
    env.on_heartbeat = lambda *details: beats.append(details)
    interval = heartbeat.beat_interval(1.5)

    async def short_block() -> None:
        async with heartbeat.heartbeating("working"):
            await asyncio.sleep(interval / 10)

    async def long_block() -> None:
        async with heartbeat.heartbeating("working"):
            await asyncio.sleep(interval * 2.5)

    await env.run(short_block)
    assert beats == []
    await env.run(long_block)
    assert beats and set(beats) == {("working",)}


def test_beats_leave_room_for_a_late_one() -> None:
    """Two thirds of the timeout apart, but never closer to it than 3 s (or a third of it):
    the default 9 s timeout beats every 6 s, a 30 s one every 20 s, a 2 s one every 0.67 s."""
    assert heartbeat.beat_interval(9) == 6
    assert heartbeat.beat_interval(30) == 20
    assert heartbeat.beat_interval(2) == pytest.approx(2 / 3)
    assert heartbeat.beat_interval(4.5) == 1.5


async def test_a_failing_block_wins_over_a_failing_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """heartbeating(): the block's own failure is what the activity raises, even when the
    heartbeats failed too; a heartbeat failure after a block that succeeded is raised."""
    monkeypatch.setattr(heartbeat, "DEFAULT_INTERVAL_SECONDS", 0.01)

    def broken() -> str:
        raise RuntimeError("heartbeat failed")

    async def failing_block() -> None:
        async with heartbeat.heartbeating(progress=broken):
            await asyncio.sleep(0.05)
            raise ValueError("the work failed")

    async def quiet_block() -> None:
        async with heartbeat.heartbeating(progress=broken):
            await asyncio.sleep(0.05)

    with pytest.raises(ValueError, match="the work failed"):
        await ActivityEnvironment().run(failing_block)
    with pytest.raises(RuntimeError, match="heartbeat failed"):
        await ActivityEnvironment().run(quiet_block)


async def test_cancelling_the_activity_kills_the_command(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling run_tool (activity cancellation) kills the command and its children."""
    monkeypatch.setattr(heartbeat, "DEFAULT_INTERVAL_SECONDS", 0.1)
    word = marker()
    command = _parent_and_child(word, then='pathlib.Path("up").touch(); time.sleep(3600)')
    env = ActivityEnvironment()
    call = request(workspace, "run_command", json.dumps({"command": command}))
    task = asyncio.ensure_future(
        env.run(ToolActivities().run_tool, call.model_copy(update={"policy": COMMANDS}))
    )
    deadline = time.monotonic() + 120  # a watchdog against a hang, not a measured duration
    while not (workspace / "up").exists():
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.05)
    running = pids_with(word)
    assert len(running) >= 2  # the command and its child (and bwrap's, when confined)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone_within(running, seconds=30)  # a watchdog: they sleep an hour unless killed
