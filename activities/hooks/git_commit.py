"""The built-in ``git_commit`` hook: commit what a step changed, in a workspace that is a git
repository.

**Which repository.** The workspace must be the top level of its own repository: its ``.git``
is in the workspace (or is the ``.git`` file of a linked worktree, ``git worktree add``). Git
is told not to look above the workspace (``GIT_CEILING_DIRECTORIES``), so a workspace that only
lies inside a larger repository (a home directory under version control, the directory that
holds all workspaces) is skipped, never committed to. A ``.git`` that points out of the
workspace (a ``gitdir:`` file, ``core.worktree``) and is not a worktree of it is refused.

**What is committed.** Exactly what the step's tools changed, never what the user had staged
or changed: the paths the tools reported (``write_file``, ``edit_file``) and, after a step in
which a tool that reports nothing ran (a command, a custom or MCP tool), every path that changed
since the hook last looked. The hook remembers the work tree as it left it, per workflow id, as
a tree under ``refs/treadle/seen/``; before its first look for a run, a path counts as the
step's when its inode changed after the run started (a command's deletion is then missed).
A user's edit made *during* a run, between two hooks, is not told apart from a command's.
``.gitignore`` is honoured.

**The user's index and work tree are not touched.** The commit is built in an index of its own
(``GIT_INDEX_FILE``, read from HEAD), written with ``write-tree`` and ``commit-tree``, and HEAD
moves with ``update-ref`` from the commit it was built on (compare-and-swap). Afterwards the
user's index takes the committed paths as committed (``git reset <commit> -- <paths>``, as
``git commit <paths>`` would leave them); everything else it holds stays as it was. While a
merge, rebase, cherry-pick or revert is unfinished the hook commits nothing.

**How git runs.** No shell, and an environment of our own: no system or user configuration
(``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``, an empty ``HOME``), so the worker's
``~/.gitconfig`` cannot sign, template or redirect anything. Configuration that makes git start
a program is overridden on the command line, which wins over the repository's own: no hooks
(``core.hooksPath=/dev/null``), no fsmonitor, no signing, no automatic gc, and no filter
driver (``filter.<name>.clean``) the repository configures; the content is committed as it is.
What is *not* confined: links inside ``.git`` itself (an ``objects`` directory linked out of
the workspace is written through), and git's own resource use.

**Idempotence.** The message ends with a trailer ``Treadle-Step: <workflow id>/<run id>/<step>``.
Before building, the last commits are searched for it: an attempt that runs again after a
worker died mid-hook (maybe after its commit) returns that commit and commits nothing more.
HEAD moves in one atomic ``update-ref``, so a killed attempt either moved it or did not.

**Failures.** A lock a live git process holds (``index.lock``, a ref's lock) is ``HookBusy``,
retried by Temporal; a lock no process holds (its git was killed) is removed and the command
run again (``treadle.activities.hooks.locks``). Every other refusal of git is ``HookFailed``,
recorded and the run goes on. A git that is running when the attempt is cancelled is left to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from temporalio import activity
from temporalio.service import RPCError

from treadle.activities.hooks import locks
from treadle.activities.hooks.base import HookBusy, HookFailed
from treadle.activities.tools.workspace import is_inside
from treadle.workflows.agent.messages.hooks import (
    DEFAULT_COMMIT_AUTHOR,
    HookRequest,
    HookResult,
    parse_author,
)

__all__ = [
    "GIT_OVERRIDES",
    "STEP_TRAILER",
    "GitCommit",
    "commit_message",
    "git_environment",
    "step_key",
]

STEP_TRAILER = "Treadle-Step"
"""The trailer naming the run and step a commit belongs to: the hook's idempotence key."""
IDEMPOTENCE_WINDOW = 50
"""How many commits back from HEAD a step's commit is looked for: another run or a person may
have committed on top of it since the attempt that made it."""
MAX_LISTED_FILES = 50
"""A commit message lists this many changed files, then says how many more there are."""
GIT_FINISH_GRACE_SECONDS = 30.0
"""On cancellation, how long a running git is given to finish rather than be killed holding
its lock."""
REPORTING_TOOLS = frozenset({"write_file", "edit_file"})
"""Tools that report every path they change; after a step of only these, only those paths are
committed. Any other tool (a command, a custom or MCP tool) may change files unreported."""
SEEN_REFS = "refs/treadle/seen/"
"""Under this prefix, per workflow id, the tree of the work tree as the hook last left it: what
changed since is what the next step's commands did."""
DESCRIBE_SECONDS = 10.0
"""How long Temporal is asked for the run's start before the hook goes on without it."""
MESSAGE_CHARS = 600
"""Git's complaint is cut to this many characters in a ``failed`` result."""

GIT_OVERRIDES: tuple[str, ...] = (
    "core.hooksPath=/dev/null",  # no hook of the repository runs: pre-commit, post-commit...
    "core.fsmonitor=false",  # a configured fsmonitor is a program git would start
    "commit.gpgSign=false",  # signing needs keys and an agent the worker does not have
    "log.showSignature=false",  # reading the log would start gpg
    "gc.auto=0",  # no automatic gc, which may detach a process that outlives the activity
    "maintenance.auto=false",
    "core.pager=cat",
    "i18n.logOutputEncoding=UTF-8",  # the idempotence check reads messages as we wrote them
)
"""``-c`` settings for every git call; the command line wins over the repository's config."""

_LOCK = re.compile(r"Unable to create '(?P<path>[^']+\.lock)': File exists")
_DRIVER = re.compile(r"filter\.(?P<driver>.+)\.(?P<var>[a-z]+)", re.DOTALL)
_SAFE_DRIVER = re.compile(r"[^=\x00-\x1f]+")
"""A filter driver name that ``-c filter.<name>.clean=`` can name (a ``=`` would end the key)."""


def git_environment(
    environ: Mapping[str, str], home: str, *, ceiling: str | None = None
) -> dict[str, str]:
    """The whole environment git runs with: ``PATH`` from ``environ``, nothing else inherited
    (no ``GIT_DIR``, ``GIT_INDEX_FILE`` or credentials from the worker's environment)."""
    env = {
        "PATH": environ.get("PATH", os.defpath),
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_EDITOR": ":",
        "LC_ALL": "C",  # git's messages in English: a held lock is recognised by its wording
    }
    if ceiling is not None:
        env["GIT_CEILING_DIRECTORIES"] = ceiling
    return env


def _one_line(text: str) -> str:
    """``text`` with line breaks and other control characters shown as ``?``."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def step_key(request: HookRequest) -> str:
    """``<workflow id>/<run id>/<step>``: the same for every attempt of one hook call."""
    return _one_line(f"{request.workflow_id}/{request.run_id}/{request.step}")


def commit_message(request: HookRequest, changes: Sequence[tuple[str, str]]) -> str:
    """The message: the step and its tools, the files (``(status, path)`` as git lists them),
    the run, and the idempotence trailer::

        treadle: step 3 — write_file, edit_file

        Files:
        - notes.md
        - src/app.py (new)

        Run: agent-1234
        Treadle-Step: agent-1234/<run id>/3
    """
    tools = ", ".join(dict.fromkeys(_one_line(tool) for tool in request.tools))
    lines = [f"treadle: step {request.step}" + (f" — {tools}" if tools else ""), "", "Files:"]
    for status, path in changes[:MAX_LISTED_FILES]:
        mark = {"A": " (new)", "D": " (deleted)"}.get(status, "")
        lines.append(f"- {_one_line(path)}{mark}")
    if len(changes) > MAX_LISTED_FILES:
        lines.append(f"- ... and {len(changes) - MAX_LISTED_FILES} more")
    lines += ["", f"Run: {_one_line(request.workflow_id)}", f"{STEP_TRAILER}: {step_key(request)}"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class _Completed:
    args: tuple[str, ...]
    code: int
    stdout: bytes
    stderr: str


def _failure(done: _Completed) -> HookBusy | HookFailed:
    """Git's refusal as the hook's error: a held lock is worth retrying, the rest is not."""
    text = done.stderr.strip()
    lock = _LOCK.search(text)
    if lock is not None:
        return HookBusy(
            f"the repository is locked: {lock['path']} exists (another git process is using "
            "it, or one was killed and left its lock behind)"
        )
    said = "; ".join(line.strip() for line in text.splitlines() if line.strip()) or "(no output)"
    if len(said) > MESSAGE_CHARS:
        said = said[:MESSAGE_CHARS] + " [...]"
    return HookFailed(f"git {done.args[0]} failed (exit code {done.code}): {said}")


@dataclass(frozen=True)
class _Git:
    """Runs git in one directory, with one environment and the overrides."""

    program: str
    cwd: Path
    env: Mapping[str, str]
    overrides: tuple[str, ...] = GIT_OVERRIDES

    def with_overrides(self, extra: Sequence[str]) -> _Git:
        return _Git(self.program, self.cwd, self.env, (*self.overrides, *extra))

    def with_env(self, **extra: str) -> _Git:
        return _Git(self.program, self.cwd, {**self.env, **extra}, self.overrides)

    async def __call__(self, *args: str, ok: Sequence[int] | None = (0,)) -> _Completed:
        """Run ``git <args>``; an exit code not in ``ok`` raises the hook's error (``None``:
        any code is returned)."""
        running = asyncio.ensure_future(self._run(args))
        try:
            done = await asyncio.shield(running)
        except asyncio.CancelledError:
            # Killed mid-commit, git would leave its lock behind for every later attempt; let it
            # finish instead (the next attempt finds its commit either way).
            await asyncio.wait({running}, timeout=GIT_FINISH_GRACE_SECONDS)
            raise
        if ok is not None and done.code not in ok:
            raise _failure(done)
        return done

    async def _run(self, args: tuple[str, ...]) -> _Completed:
        options = [word for setting in self.overrides for word in ("-c", setting)]
        try:
            process = await asyncio.create_subprocess_exec(
                self.program,
                *options,
                *args,
                cwd=self.cwd,
                env=dict(self.env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # Its own session: a Ctrl-C meant for the worker must not kill a commit halfway.
                start_new_session=True,
            )
        except OSError as exc:
            raise HookFailed(f"git could not be started: {exc.strerror or exc}") from exc
        stdout, stderr = await process.communicate()
        code = -1 if process.returncode is None else process.returncode
        return _Completed(args, code, stdout, stderr.decode("utf-8", errors="replace"))


@contextlib.asynccontextmanager
async def _empty_home() -> AsyncIterator[str]:
    """A fresh empty directory for ``HOME``: nothing of the worker's user reaches git."""
    home = await asyncio.to_thread(tempfile.mkdtemp, prefix="treadle-git-home-")
    try:
        yield home
    finally:
        await asyncio.to_thread(shutil.rmtree, home, True)


def _trust_workspace(home: str, root: Path) -> str | None:
    """A global config of one line, ``safe.directory = <workspace>``, or ``None`` when the path
    cannot be written in one. Git refuses a repository another user owns, and a root worker's
    commands run as an unprivileged user (``treadle.activities.tools.confinement``) that may own it
    now; the hook trusts the workspace anyway, having switched off what its config could run."""
    text = os.fspath(root)
    if any(not ch.isprintable() for ch in text):
        return None
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    config = Path(home, "trust.gitconfig")
    config.write_text(f'[safe]\n\tdirectory = "{quoted}"\n', encoding="utf-8")
    return os.fspath(config)


def _workspace_root(workspace: str) -> Path:
    """The workspace's real path; ``HookFailed`` unless it is a directory."""
    real = Path(os.path.realpath(workspace))
    if not real.is_dir():
        what = "does not exist" if not real.exists() else "is not a directory"
        raise HookFailed(f"the workspace {workspace} {what}")
    return real


def _is_worktree_of(git_dir: str, root: Path) -> bool:
    """Whether ``git_dir`` is a linked worktree's administrative directory whose back-link
    (``<git_dir>/gitdir``, written by ``git worktree add``) names this workspace's ``.git``."""
    try:
        back = Path(git_dir, "gitdir").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return os.path.realpath(os.path.join(git_dir, back)) == os.path.realpath(root / ".git")


def _check_layout(root: Path, top: str, git_dir: str, common_dir: str) -> None:
    """``HookFailed`` unless the repository's work tree is the workspace and its metadata is in
    the workspace (or it is a linked worktree of a repository elsewhere)."""
    if os.path.realpath(top) != os.fspath(root):
        raise HookFailed(
            f"the repository in the workspace names another work tree ({top}); the hook commits "
            "only in a repository whose work tree is the workspace"
        )
    inside = is_inside(os.path.realpath(git_dir), root) and is_inside(
        os.path.realpath(os.path.join(root, common_dir)), root
    )
    if not inside and not _is_worktree_of(git_dir, root):
        raise HookFailed(
            f"the workspace's .git leads out of the workspace (to {git_dir}) and is not a "
            "worktree of it; the hook commits only into a repository of the workspace"
        )


@dataclass(frozen=True)
class GitCommit:
    """Commit what the step changed, once per step, in a workspace that is a git repository."""

    name: str = "git_commit"
    program: str = "git"
    """The git program, looked up on the worker's ``PATH``."""
    environ: Mapping[str, str] | None = field(default=None, repr=False)
    """Where ``PATH`` is read when the hook runs; the worker's environment when ``None``."""

    async def run(self, request: HookRequest) -> HookResult:
        """Stage and commit the workspace's changes for ``request.step``, or say why not."""
        root = await asyncio.to_thread(_workspace_root, request.workspace)
        environ = os.environ if self.environ is None else self.environ
        program = shutil.which(self.program, path=environ.get("PATH", os.defpath))
        if program is None:
            raise HookFailed(f"git is not installed on the worker ({self.program!r} not on PATH)")
        author = parse_author(request.commit_author or DEFAULT_COMMIT_AUTHOR)
        async with _empty_home() as home:
            # A ceiling with a ':' in it cannot be written down; the layout check still holds.
            parent = os.fspath(root.parent)
            env = git_environment(environ, home, ceiling=None if ":" in parent else parent)
            trusting = await asyncio.to_thread(_trust_workspace, home, root)
            if trusting is not None:
                env["GIT_CONFIG_GLOBAL"] = trusting
            git = _Git(program, root, env)
            skipped = await self._repository(git, root, environ, home)
            if skipped is not None:
                return HookResult(hook=self.name, outcome="skipped", detail=skipped)
            scratch = Path(home, "scratch")
            await asyncio.to_thread(scratch.mkdir)
            return await self._commit(git, request, author, scratch)

    async def _repository(
        self, git: _Git, root: Path, environ: Mapping[str, str], home: str
    ) -> str | None:
        """Why the workspace is skipped, or ``None`` when it is a repository of its own."""
        found = await git(
            "rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir", ok=(0, 128)
        )
        if found.code == 0:
            lines = os.fsdecode(found.stdout).splitlines()
            if len(lines) != 3:
                raise HookFailed(f"git rev-parse answered {len(lines)} lines instead of 3")
            await asyncio.to_thread(_check_layout, root, *lines)
            return None
        if "not a git repository" not in found.stderr:
            raise _failure(found)
        # Only to say so: is the workspace inside someone else's repository?
        outer = _Git(git.program, root, git_environment(environ, home))
        enclosing = await outer("rev-parse", "--show-toplevel", ok=(0, 128))
        if enclosing.code == 0:
            top = os.fsdecode(enclosing.stdout).strip()
            return (
                f"the workspace is not a git repository of its own (it is inside the one at "
                f"{top}, which the hook never commits to)"
            )
        return "the workspace is not a git repository"

    async def _commit(
        self, git: _Git, request: HookRequest, author: tuple[str, str], scratch: Path
    ) -> HookResult:
        trailer = f"{STEP_TRAILER}: {step_key(request)}"
        git = git.with_overrides(await _filters_off(git))
        await _refuse_unfinished(git)
        earlier = await _commit_with(git, trailer)
        if earlier is not None:
            await _settle(git, request, scratch, earlier, None)
            return self._already(request, earlier)
        head = await _head(git)
        staging = git.with_env(GIT_INDEX_FILE=os.fspath(scratch / "step.index"))
        await staging("read-tree", *((head,) if head else ("--empty",)))
        dirty = await _differing(staging)
        paths = sorted(dirty & await self._step_paths(git, request, scratch, dirty))
        if paths:
            await staging(*_pathspec_args(scratch, "add", "--all", paths=paths))
        changes = await _staged(staging) if paths else []
        if not changes:
            # A git left running by a killed attempt may have committed since the look above.
            earlier = await _commit_with(git, trailer)
            if earlier is not None:
                await _settle(git, request, scratch, earlier, None)
                return self._already(request, earlier)
            await _settle(git, request, scratch, None, None)
            return HookResult(
                hook=self.name,
                outcome="nothing",
                detail="nothing to commit: the step's tools changed nothing since the last commit",
            )
        tree = (await staging("write-tree")).stdout.decode("ascii").strip()
        message = scratch / "message"
        await asyncio.to_thread(message.write_bytes, commit_message(request, changes).encode())
        name, email = author
        committing = git.with_env(
            GIT_AUTHOR_NAME=name,
            GIT_AUTHOR_EMAIL=email,
            GIT_COMMITTER_NAME=name,
            GIT_COMMITTER_EMAIL=email,
        )
        parents = ("-p", head) if head else ()
        made = await committing("commit-tree", tree, *parents, "-F", os.fspath(message))
        commit = made.stdout.decode("ascii").strip()
        # Compare-and-swap: HEAD moves only from the commit the step was built on.
        moved = await _locked(
            git, "update-ref", "-m", f"treadle: step {request.step}", "HEAD", commit, head or ""
        )
        if moved.code != 0:
            earlier = await _commit_with(git, trailer)
            if earlier is not None:  # a git of a killed attempt got there first
                await _settle(git, request, scratch, earlier, None)
                return self._already(request, earlier)
            raise HookBusy(f"HEAD moved while the step was being committed ({_said(moved)})")
        await _settle(git, request, scratch, commit, paths)
        count = f"{len(changes)} file{'s' if len(changes) != 1 else ''}"
        return HookResult(
            hook=self.name,
            outcome="done",
            detail=f"committed {count} as {commit[:12]}",
            commit=commit,
        )

    async def _step_paths(
        self, git: _Git, request: HookRequest, scratch: Path, dirty: set[str]
    ) -> set[str]:
        """The paths the step's tools changed: those they reported, and, when a tool that
        reports nothing ran (a command), every path changed since the hook last looked."""
        reported = {os.path.normpath(path) for path in request.files}
        if set(request.tools) <= REPORTING_TOOLS:
            return reported
        seen = await _seen_tree(git, request)
        if seen is not None:
            looking = git.with_env(GIT_INDEX_FILE=os.fspath(scratch / "seen.index"))
            await looking("read-tree", seen)
            return reported | await _differing(looking)
        started = await _run_started()
        if started is None:
            return reported
        root = git.cwd
        return reported | await asyncio.to_thread(_changed_after, root, dirty, started)

    def _already(self, request: HookRequest, commit: str) -> HookResult:
        return HookResult(
            hook=self.name,
            outcome="done",
            detail=f"step {request.step} was already committed as {commit[:12]}",
            commit=commit,
        )


def _said(done: _Completed) -> str:
    return "; ".join(line.strip() for line in done.stderr.splitlines() if line.strip())


async def _head(git: _Git) -> str | None:
    found = await git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", ok=(0, 1, 128))
    return found.stdout.decode("ascii").strip() if found.code == 0 else None


_UNFINISHED = {
    "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick",
    "REVERT_HEAD": "a revert",
    "rebase-merge": "a rebase",
    "rebase-apply": "a rebase or am",
}


async def _refuse_unfinished(git: _Git) -> None:
    """``HookFailed`` while a merge, rebase, cherry-pick or revert waits for the user: a step
    commit in the middle of one would be taken into it."""
    found = await git("rev-parse", *(w for name in _UNFINISHED for w in ("--git-path", name)))
    for name, path in zip(_UNFINISHED, os.fsdecode(found.stdout).splitlines(), strict=False):
        if await asyncio.to_thread(os.path.lexists, git.cwd / path):
            raise HookFailed(
                f"the repository is in the middle of {_UNFINISHED[name]} ({name} exists); the "
                "hook commits nothing until it is finished"
            )


async def _differing(git: _Git) -> set[str]:
    """Paths whose work-tree state differs from ``git``'s index (changed, deleted, untracked
    and not ignored), relative to the top level."""
    found = await git(
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--no-renames",
        "--ignore-submodules=all",
    )
    # ``XY path``: X compares the index with HEAD, Y the work tree with the index.
    return {
        os.fsdecode(entry[3:])
        for entry in found.stdout.split(b"\0")
        if len(entry) > 3 and entry[1:2] != b" "
    }


def _changed_after(root: Path, paths: set[str], since: float) -> set[str]:
    """Of ``paths``, those whose inode changed at or after ``since`` (a deletion has none)."""
    changed = set()
    for path in paths:
        with contextlib.suppress(OSError):
            if os.lstat(root / path).st_ctime >= since:
                changed.add(path)
    return changed


async def _run_started() -> float | None:
    """When the run calling the hook started (server time), asked of Temporal; ``None`` outside a
    worker or when it cannot be told."""
    if not activity.in_activity():
        return None
    try:
        info = activity.info()  # the run that called the hook: the request's
        if info.workflow_id is None:
            return None
        handle = activity.client().get_workflow_handle(
            info.workflow_id, run_id=info.workflow_run_id
        )
        described = await asyncio.wait_for(handle.describe(), DESCRIBE_SECONDS)
    except (RuntimeError, TimeoutError, RPCError) as exc:
        activity.logger.info("hook.run_start_unknown", extra={"error": type(exc).__name__})
        return None
    return described.start_time.timestamp()


def _seen_ref(request: HookRequest) -> str:
    digest = hashlib.sha256(request.workflow_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{SEEN_REFS}{digest[:32]}"


async def _seen_tree(git: _Git, request: HookRequest) -> str | None:
    found = await git(
        "rev-parse", "--verify", "--quiet", f"{_seen_ref(request)}^{{tree}}", ok=(0, 1, 128)
    )
    return found.stdout.decode("ascii").strip() if found.code == 0 else None


def _pathspec_args(scratch: Path, *args: str, paths: Sequence[str]) -> tuple[str, ...]:
    """``args`` with ``paths`` given through a file (any number, any characters)."""
    fd, spec = tempfile.mkstemp(prefix="paths-", dir=scratch)
    with os.fdopen(fd, "wb") as out:
        out.write(b"".join(os.fsencode(path) + b"\0" for path in paths))
    return (*args, f"--pathspec-from-file={spec}", "--pathspec-file-nul")


async def _settle(
    git: _Git,
    request: HookRequest,
    scratch: Path,
    commit: str | None,
    paths: Sequence[str] | None,
) -> None:
    """After the step's commit (or none): the user's index takes the committed paths as
    committed (nothing else in it changes), and what the work tree holds now is remembered,
    so the next step's commands are told apart from what was there before."""
    if commit is not None:
        if paths is None:
            listed = await git(
                "diff-tree", "--no-commit-id", "--root", "-r", "-z", "--name-only", commit
            )
            paths = [os.fsdecode(p) for p in listed.stdout.split(b"\0") if p]
        if paths:
            done = await _locked(git, *_pathspec_args(scratch, "reset", "-q", commit, paths=paths))
            if done.code != 0:
                raise _failure(done)
    head = await _head(git)
    seeing = git.with_env(GIT_INDEX_FILE=os.fspath(scratch / "now.index"))
    await seeing("read-tree", *((head,) if head else ("--empty",)))
    await seeing("add", "--all", "--", ".")
    tree = (await seeing("write-tree")).stdout.decode("ascii").strip()
    await _locked(git, "update-ref", _seen_ref(request), tree)


async def _locked(git: _Git, *args: str) -> _Completed:
    """``git <args>``, once more after removing a lock a dead process left; a lock a live
    process holds is ``HookBusy``. Other refusals are returned, not raised."""
    for _ in range(2):
        done = await git(*args, ok=None)
        lock = _LOCK.search(done.stderr)
        if lock is None:
            return done
        path = git.cwd / lock["path"]
        if not await asyncio.to_thread(locks.remove_if_stale, path):
            raise _failure(done)
    return done


async def _commit_with(git: _Git, trailer: str) -> str | None:
    """The id of the recent commit whose message has the line ``trailer``, if there is one."""
    head = await git("rev-parse", "--verify", "--quiet", "HEAD", ok=(0, 1))
    if head.code != 0:
        return None  # no commit yet
    log = await git("log", f"--max-count={IDEMPOTENCE_WINDOW}", "-z", "--format=%H%n%B", "HEAD")
    wanted = trailer.encode()
    for entry in log.stdout.split(b"\0"):
        commit, _, message = entry.partition(b"\n")
        if wanted in message.splitlines():
            return commit.decode("ascii")
    return None


async def _filters_off(git: _Git) -> list[str]:
    """Overrides that empty every filter driver the repository configures: a clean filter is
    a program ``git add`` would start, and the repository's config may be the model's work."""
    found = await git("config", "-z", "--name-only", "--get-regexp", r"^filter\.", ok=(0, 1))
    drivers = set()
    for key in found.stdout.split(b"\0"):
        match = _DRIVER.fullmatch(os.fsdecode(key))
        if match is None:
            continue
        if not _SAFE_DRIVER.fullmatch(match["driver"]):
            raise HookFailed(
                f"the repository configures a filter driver named {match['driver']!r}, which "
                "the hook cannot switch off; it commits nothing through it"
            )
        drivers.add(match["driver"])
    return [
        f"filter.{driver}.{var}={value}"
        for driver in sorted(drivers)
        for var, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))
    ]


async def _staged(git: _Git) -> list[tuple[str, str]]:
    """``(status letter, path)`` of every staged change under the workspace, as git lists it."""
    diff = await git(
        "diff", "--cached", "--name-status", "-z", "--no-renames", "--no-ext-diff", "--", "."
    )
    words = diff.stdout.split(b"\0")
    return [
        (words[i].decode("ascii", errors="replace"), words[i + 1].decode("utf-8", "replace"))
        for i in range(0, len(words) - 1, 2)
    ]
