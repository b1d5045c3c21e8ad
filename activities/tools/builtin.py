"""The tool implementations and the ``run_tool`` activity that runs them.

Each tool is a plain async function ``(workspace, args, policy) -> ToolOutput`` that raises
``ToolError`` when it cannot do what was asked, so it can be tested without Temporal.
``execute_tool`` is the boundary: it validates the raw arguments, runs the tool and turns every
expected failure into a ``ToolResult(success=False, output="ERROR: ...")``, because a failed tool
call is an observation for the model, not an activity failure. Only bugs and unexpected OS
errors (EIO and the like) raise, and those Temporal retries.

File work runs in a thread (``asyncio.to_thread``, one hand-off a call: the workspace is made
in the same thread) and commands run as asyncio subprocesses, so the worker's event loop never
blocks.

``run_command`` (in ``commands``) checks a command's arguments for paths leading out of the
workspace on every worker, and runs it under bubblewrap where the worker has it
(``confinement``: what is and is not confined). Its processes die with the worker, with its
timeout and with the activity attempt that started it (``processes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from temporalio import activity

from treadle.activities import telemetry
from treadle.activities.content import door
from treadle.activities.errors import StoreUnavailable, ToolError
from treadle.activities.sent_marks import outcome_unknown, run_once
from treadle.activities.store.conversation import ConversationStore
from treadle.activities.tools import registry
from treadle.activities.tools.commands import command_environment, run_command, stop_lost_command
from treadle.activities.tools.confinement import Confinement
from treadle.activities.tools.custom import Tool, ToolContext
from treadle.activities.tools.output import ToolOutput, cap_output, content_hash, failed
from treadle.activities.tools.workspace import is_inside, relative, resolve, workspace_root
from treadle.activities.workspace.follow import Follower, may_change, snapshot_after
from treadle.activities.workspace.snapshot import Snapshotter, TooMuchToRead
from treadle.workflows.agent.messages.catalogue import (
    TOOLS,
    EditFileArgs,
    ListDirArgs,
    ReadFileArgs,
    RunCommandArgs,
    SearchFilesArgs,
    ToolArgs,
    ToolArgumentsError,
    WriteFileArgs,
    parse_arguments,
)
from treadle.workflows.agent.messages.models import ToolPolicy, ToolRequest, ToolResult
from treadle.workflows.agent.parts.toolbox import short_target

__all__ = [
    "Confinement",
    "ToolActivities",
    "ToolOutput",
    "cap_output",
    "command_environment",
    "edit_file",
    "execute_tool",
    "list_dir",
    "read_file",
    "run_command",
    "search_files",
    "write_file",
]

MAX_READ_BYTES = 10 * 1024 * 1024
"""read_file and edit_file refuse larger files rather than load them whole into the worker."""
MAX_SEARCH_FILE_BYTES = 1024 * 1024
"""search_files skips larger files: they are almost always data, logs or generated code."""
BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this many leading bytes marks a file as binary (the heuristic git uses)."""
SEARCH_LINE_CHARS = 300
"""A matching line longer than this (minified code) is shortened in search results."""
SEARCH_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv"})
"""Directories search_files does not descend into: metadata and installed dependencies."""
# OS errors that describe the workspace's state (the model can react to them), as opposed to a
# broken disk or a bug, which should fail the attempt so Temporal retries it.
_EXPECTED_ERRNOS: Mapping[int, str] = {
    errno.ENOENT: "no such file or directory",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "a path component is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EEXIST: "already exists",
    errno.ELOOP: "too many levels of symbolic links",
    errno.ENAMETOOLONG: "file name too long",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on device",
}


# --------------------------------------------------------------------------------------------
# Shared file helpers (synchronous: they run in a worker thread)
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _expected_os_errors(workspace: Path) -> Iterator[None]:
    """Turn OS errors that describe the workspace into ``ToolError``; let the rest raise."""
    try:
        yield
    except OSError as exc:
        phrase = _EXPECTED_ERRNOS.get(exc.errno or 0)
        if phrase is None:
            raise
        root = workspace_root(workspace)
        name = exc.filename
        if isinstance(name, str) and is_inside(os.path.abspath(name), root):
            raise ToolError(f"{relative(root, name)}: {phrase}") from exc
        raise ToolError(phrase) from exc


def _split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept, split on ``\\n`` only, so numbers match grep and editors."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _read_text(real: Path, rel: str) -> str:
    """A regular file's UTF-8 text, or a ``ToolError`` saying why it cannot be read as text."""
    try:
        info = os.stat(real)
    except FileNotFoundError:
        raise ToolError(f"{rel} does not exist") from None
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{rel} is a directory; use list_dir to see its entries")
    if not stat.S_ISREG(info.st_mode):
        # A FIFO or device would block the read forever or never end.
        raise ToolError(f"{rel} is not a regular file")
    if info.st_size > MAX_READ_BYTES:
        raise ToolError(
            f"{rel} is too large to read ({info.st_size} bytes; the limit is {MAX_READ_BYTES})"
        )
    data = real.read_bytes()
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ToolError(f"{rel} is a binary file; only text files can be read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{rel} is not UTF-8 text (invalid byte at offset {exc.start})") from exc


def _atomic_write(target: Path, data: bytes) -> None:
    """Replace ``target`` with ``data`` so readers see the old or the new file, never half."""
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    # O_EXCL never follows a link planted at the temporary name; 0o666 lets the umask decide.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _occurrences(text: str, needle: str) -> int:
    """Occurrences of ``needle``, overlapping ones included: each is a different edit site."""
    count, start = 0, text.find(needle)
    while start != -1:
        count += 1
        start = text.find(needle, start + 1)
    return count


# --------------------------------------------------------------------------------------------
# File tools
# --------------------------------------------------------------------------------------------


async def read_file(workspace: Path, args: ReadFileArgs, policy: ToolPolicy) -> ToolOutput:
    """A text file's content, optionally the lines from ``offset`` on (at most ``limit``)."""
    return await asyncio.to_thread(_in_workspace, _read_file, workspace, args)


def _read_file(workspace: Path, args: ReadFileArgs) -> ToolOutput:
    with _expected_os_errors(workspace):
        real = resolve(workspace, args.path)
        rel = relative(workspace, real)
        text = _read_text(real, rel)
    if not text:
        return ToolOutput(f"{rel} is empty")
    lines = _split_lines(text)
    total = len(lines)
    if args.offset > total:
        raise ToolError(f"offset {args.offset} is past the end of {rel} ({total} lines)")
    start = args.offset - 1
    end = total if args.limit is None else min(total, start + args.limit)
    body = "".join(lines[start:end])
    if start == 0 and end == total:
        return ToolOutput(body)
    # The range goes first so an output cap cannot cut it off.
    more = f"; continue with offset={end + 1}" if end < total else ""
    return ToolOutput(f"[lines {start + 1}-{end} of {total} in {rel}{more}]\n{body}")


async def write_file(workspace: Path, args: WriteFileArgs, policy: ToolPolicy) -> ToolOutput:
    """Create or replace a text file atomically, creating its parent directories."""
    return await asyncio.to_thread(_in_workspace, _write_file, workspace, args)


def _write_file(workspace: Path, args: WriteFileArgs) -> ToolOutput:
    with _expected_os_errors(workspace):
        real = resolve(workspace, args.path)
        rel = relative(workspace, real)
        if real.is_dir():
            raise ToolError(f"{rel} is a directory")
        try:
            real.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ToolError(
                f"cannot create the directory for {rel}: a part of the path is a file"
            ) from None
        data = args.content.encode("utf-8")
        _atomic_write(real, data)
    return _changed(rel, data, f"wrote {len(data)} bytes to {rel}")


async def edit_file(workspace: Path, args: EditFileArgs, policy: ToolPolicy) -> ToolOutput:
    """Replace the one exact occurrence of ``old_text`` with ``new_text``, atomically."""
    return await asyncio.to_thread(_in_workspace, _edit_file, workspace, args)


def _edit_file(workspace: Path, args: EditFileArgs) -> ToolOutput:
    with _expected_os_errors(workspace):
        real = resolve(workspace, args.path)
        rel = relative(workspace, real)
        text = _read_text(real, rel)
        count = _occurrences(text, args.old_text)
        if count == 0:
            raise ToolError(f"old_text not found in {rel}")
        if count > 1:
            raise ToolError(
                f"old_text occurs {count} times in {rel}; include more context so it is unique"
            )
        index = text.index(args.old_text)
        line = text.count("\n", 0, index) + 1
        edited = (text[:index] + args.new_text + text[index + len(args.old_text) :]).encode()
        _atomic_write(real, edited)
    return _changed(rel, edited, f"edited {rel}: replaced 1 occurrence at line {line}")


def _changed(rel: str, data: bytes, text: str) -> ToolOutput:
    """What a write to ``rel`` tells the loop: the path, and its new content's hash for
    progress tracking (the same content written again is no progress)."""
    return ToolOutput(text, mutated_paths=(rel,), content_hashes=((rel, content_hash(data)),))


async def list_dir(workspace: Path, args: ListDirArgs, policy: ToolPolicy) -> ToolOutput:
    """A directory's entries by name: ``dir/``, ``file  (N bytes)``, ``link -> target``."""
    return await asyncio.to_thread(_in_workspace, _list_dir, workspace, args)


def _list_dir(workspace: Path, args: ListDirArgs) -> ToolOutput:
    with _expected_os_errors(workspace):
        root = workspace_root(workspace)
        real = resolve(workspace, args.path)
        rel = relative(root, real)
        if not real.exists():
            raise ToolError(f"{rel} does not exist")
        if not real.is_dir():
            raise ToolError(f"{rel} is not a directory; use read_file to read a file")
        with os.scandir(real) as entries:
            lines = [_describe_entry(entry, root) for entry in sorted(entries, key=_entry_name)]
    if not lines:
        return ToolOutput(
            "the workspace is empty" if rel == "." else f"{rel} is an empty directory"
        )
    return ToolOutput("\n".join(lines))


def _entry_name(entry: os.DirEntry[str]) -> str:
    return entry.name


def _describe_entry(entry: os.DirEntry[str], root: Path) -> str:
    if entry.is_symlink():
        # Say where a link goes only when that is inside: the listing must not map the host.
        target = os.path.realpath(entry.path)
        if not is_inside(target, root):
            return f"{entry.name} -> (outside workspace)"
        if not os.path.exists(target):
            return f"{entry.name} -> (broken link)"
        suffix = "/" if os.path.isdir(target) else ""
        return f"{entry.name} -> {relative(root, target)}{suffix}"
    if entry.is_dir(follow_symlinks=False):
        return f"{entry.name}/"
    if entry.is_file(follow_symlinks=False):
        return f"{entry.name}  ({entry.stat(follow_symlinks=False).st_size} bytes)"
    return f"{entry.name}  (special file)"


async def search_files(workspace: Path, args: SearchFilesArgs, policy: ToolPolicy) -> ToolOutput:
    """Matching lines (``path:line: text``) of the text files under ``path``."""
    return await asyncio.to_thread(_in_workspace, _search_files, workspace, args)


def _search_files(workspace: Path, args: SearchFilesArgs) -> ToolOutput:
    matches = _matcher(args.pattern, regex=args.regex)
    with _expected_os_errors(workspace):
        root = workspace_root(workspace)
        real = resolve(workspace, args.path)
        rel = relative(root, real)
        if not real.exists():
            raise ToolError(f"{rel} does not exist")
        found: list[str] = []
        capped = False
        for path, dir_fd in _search_candidates(real):
            text = _searchable_text(path, dir_fd)
            if text is None:
                continue
            shown = relative(root, path)
            for number, line in enumerate(_split_lines(text), start=1):
                line = line.rstrip("\r\n")
                if not matches(line):
                    continue
                if len(found) == args.max_results:
                    capped = True
                    break
                if len(line) > SEARCH_LINE_CHARS:
                    line = line[:SEARCH_LINE_CHARS] + " [...]"
                found.append(f"{shown}:{number}: {line}")
            if capped:
                break
    if not found:
        return ToolOutput(f"no matches for {args.pattern!r} in {rel}")
    if capped:
        found.append(
            f"[results capped at {args.max_results} matches; narrow the pattern or the path]"
        )
    return ToolOutput("\n".join(found))


def _matcher(pattern: str, *, regex: bool) -> Callable[[str], bool]:
    if not regex:
        return lambda line: pattern in line
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from exc
    return lambda line: compiled.search(line) is not None


def _search_candidates(top: Path) -> Iterator[tuple[str, int | None]]:
    """(path, descriptor of its directory) of the files under ``top``, in a stable order.

    No symbolic link is followed, to a directory or to a file (as ``grep -r``): a file reached
    through a link inside the workspace is searched under its real name. Directories are entered
    by descriptor (``os.fwalk``) and files opened relative to them without following a final
    link, so a link swapped in while the search runs (by a command) cannot lead it out either.
    """
    if not top.is_dir():
        yield os.fspath(top), None
        return
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(top):
        dirnames[:] = sorted(name for name in dirnames if name not in SEARCH_SKIP_DIRS)
        for name in sorted(filenames):
            yield os.path.join(dirpath, name), dir_fd


def _searchable_text(path: str, dir_fd: int | None) -> str | None:
    """The file's text, or ``None`` for anything search skips (links, binary, big, unreadable)."""
    name = path if dir_fd is None else os.path.basename(path)
    try:
        # O_NOFOLLOW: a link is skipped (ELOOP); O_NONBLOCK: a FIFO cannot hang the open.
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SEARCH_FILE_BYTES:
                return None
            data = handle.read()
    except OSError:
        return None
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --------------------------------------------------------------------------------------------
# The boundary: raw arguments in, ToolResult out
# --------------------------------------------------------------------------------------------


async def execute_tool(
    workspace: Path,
    tool: str,
    arguments: str | Mapping[str, Any],
    policy: ToolPolicy,
    *,
    confinement: Confinement = Confinement.AUTO,
) -> ToolResult:
    """Validate and run one tool call; every expected failure is an ``ERROR:`` result."""
    try:
        args = parse_arguments(tool, arguments)
    except ToolArgumentsError as exc:
        return _failed(str(exc), policy)
    return await _execute(workspace, tool, args, policy, confinement)


async def _execute(
    workspace: Path, tool: str, args: ToolArgs, policy: ToolPolicy, confinement: Confinement
) -> ToolResult:
    """Run one call whose arguments are parsed."""
    limit = policy.max_output_chars
    try:
        custom = registry.BY_NAME.get(tool)
        if custom is not None:
            await asyncio.to_thread(_ensure_workspace, workspace)
            output = await _run_custom(custom, workspace, args, policy)
        else:
            output = await _dispatch(workspace, args, policy, confinement)
    except ToolError as exc:
        return _failed(str(exc), policy)
    return output.result(limit)


def _failed(message: str, policy: ToolPolicy) -> ToolResult:
    return failed(message, policy.max_output_chars)


async def _run_custom(
    tool: Tool[Any], workspace: Path, args: ToolArgs, policy: ToolPolicy
) -> ToolOutput:
    """One of your own tools; a plain string result is its output."""
    result = await tool.run(args, ToolContext(workspace=workspace, policy=policy))
    return ToolOutput(text=result) if isinstance(result, str) else result


def _in_workspace(
    work: Callable[[Path, Any], ToolOutput], workspace: Path, args: ToolArgs
) -> ToolOutput:
    """A file tool's work, the workspace made first, in the same thread: a file tool's call
    is one hand-off from the event loop (each costs the worker a wake-up both ways)."""
    _ensure_workspace(workspace)
    return work(workspace, args)


def _ensure_workspace(workspace: Path) -> None:
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ToolError(f"the workspace {workspace} is not a directory") from exc
    except PermissionError as exc:
        raise ToolError(f"the workspace {workspace} cannot be created: permission denied") from exc


async def _dispatch(
    workspace: Path, args: ToolArgs, policy: ToolPolicy, confinement: Confinement
) -> ToolOutput:
    match args:
        case ReadFileArgs():
            return await read_file(workspace, args, policy)
        case WriteFileArgs():
            return await write_file(workspace, args, policy)
        case EditFileArgs():
            return await edit_file(workspace, args, policy)
        case ListDirArgs():
            return await list_dir(workspace, args, policy)
        case SearchFilesArgs():
            return await search_files(workspace, args, policy)
        case RunCommandArgs():
            await asyncio.to_thread(_ensure_workspace, workspace)
            return await run_command(workspace, args, policy, confinement=confinement)
    # A catalogue entry without an implementation is a bug, not a tool failure.
    raise TypeError(f"no implementation for {type(args).__name__}")


IN_CALL_READ_BYTES = 64 * 2**20
"""Files a snapshot inside a call may read (a run's first, a worker new to the workspace, a
command that wrote much): past it the snapshot is left to the run's own activity after the
step, whose timeout is its own, rather than to the call's."""

NO_STORE = "not taken, this worker has no store (--store)"
"""``ToolResult.snapshot_skipped`` of a worker without a store asked for a snapshot."""


class ToolActivities:
    """The tool activity; a class so dependencies (hooks, limits) can be injected.

    ``confinement`` is the worker's choice of OS confinement for commands (``auto``: bubblewrap
    when it works here, otherwise argument checks only, logged once).
    """

    def __init__(
        self,
        *,
        confinement: Confinement = Confinement.AUTO,
        store: ConversationStore | None = None,
        follower: Follower | None = None,
        snapshotter: Snapshotter | None = None,
    ) -> None:
        self.confinement = confinement
        self.store = store
        self.follower = follower
        """A worker with ``--workspace-root``: runs' tools run in its copies of their
        workspaces, brought to each run's latest snapshot first (``workspace.follow``)."""
        self.snapshotter = snapshotter
        """A worker with a store: snapshots a run's own workspace after a call whose request
        asks it to (``WorkspaceSync.here``); the same one ``snapshot_workspace`` uses."""

    @activity.defn(name="run_tool")
    async def run_tool(self, request: ToolRequest) -> ToolResult:
        """Run one tool call confined to its workspace; failures come back as ``ERROR:`` data."""
        call = request.call
        # Parsed once here (the workflow sent the arguments it checked, as JSON, with stored
        # values as markers the door reads back): the target for the span and the arguments
        # the tool runs with come from the same parse.
        try:
            arguments = await door.resolve_arguments(self.store, call.arguments)
            args: ToolArgs | None = parse_arguments(call.name, arguments)
        except door.NoStore as exc:
            args, refused = None, _failed(str(exc), request.policy)
        except StoreUnavailable as exc:  # the tool has not run: the workflow waits, then again
            raise exc.to_application_error() from exc
        except ToolArgumentsError as exc:
            args, refused = None, _failed(str(exc), request.policy)
        repeatable = args is None or TOOLS[call.name].repeatable
        target = short_target(TOOLS[call.name].target(args)) if args is not None else ""
        with telemetry.tool_call(call.name, call.id, target) as span:
            if args is None:
                result = refused
            elif repeatable:
                result = await self._in_workspace(request, args)
            else:
                # Never run twice: an attempt that finds an earlier one marked sent takes its
                # outcome if this worker ran it, else says the outcome is unknown.
                async def unknown() -> ToolResult:
                    activity.logger.warning(
                        "tool.outcome_unknown tool=%s call_id=%s", call.name, call.id
                    )
                    if call.name == "run_command":  # no process of the lost attempt lives on
                        await asyncio.to_thread(stop_lost_command)
                    # The lost attempt may have changed files: the step's snapshot holds them
                    # as it left them.
                    told = _failed(outcome_unknown(call.name), request.policy)
                    return await self._snapshot_here(request, told)

                parsed = args
                result = await run_once(
                    call.id,
                    lambda: self._in_workspace(request, parsed),
                    unknown,
                    follows=request.follows,
                    marked=request.sent_before,
                )
            span.finished(result.success)
        activity.logger.info(
            "tool.finished tool=%s call_id=%s success=%s",
            request.call.name,
            request.call.id,
            result.success,
        )
        return await door.tool_output(self.store, result)

    async def _in_workspace(self, request: ToolRequest, args: ToolArgs) -> ToolResult:
        """The call in the run's own workspace, or, on a worker with a root, in its copy."""

        def execute(workspace: Path) -> Awaitable[ToolResult]:
            return _execute(workspace, request.call.name, args, request.policy, self.confinement)

        sync, name = request.sync, request.call.name
        if self.follower is not None and sync is not None:
            try:
                return await self.follower.run(_workflow_id(request), name, sync, execute)
            except StoreUnavailable as exc:  # the run waits for the store, then calls again
                raise exc.to_application_error() from exc
        return await self._snapshot_here(request, await execute(Path(request.workspace)))

    async def _snapshot_here(self, request: ToolRequest, result: ToolResult) -> ToolResult:
        """``result`` with the snapshot of the run's own workspace its request asks for."""
        sync, name = request.sync, request.call.name
        if sync is None or not sync.here or not may_change(name):
            return result
        if self.snapshotter is None:
            return result.model_copy(update={"snapshot_skipped": NO_STORE})
        workspace = Path(request.workspace)
        if not workspace.is_dir():  # nothing to snapshot: the run's after-step one says so
            return result
        try:
            return await snapshot_after(
                self.snapshotter, workspace, _workflow_id(request), name, sync, result,
                max_read_bytes=IN_CALL_READ_BYTES,
            )  # fmt: skip
        except (StoreUnavailable, TooMuchToRead) as exc:
            # The tool has run in the run's own workspace and must not run again for its
            # snapshot (a timeout or a failed attempt would): the result goes back without
            # one, and the run takes the step's snapshot after it (``snapshot_workspace``,
            # with a timeout of its own, which waits for the store).
            activity.logger.info(
                "workspace.snapshot.deferred", extra={"tool": name, "why": str(exc)}
            )
            return result


def _workflow_id(request: ToolRequest) -> str:
    """The run whose call this is (its workspace's name when called outside Temporal)."""
    return activity.info().workflow_id or request.workspace
