"""What a command may reach: argument checks on every worker, bubblewrap where the worker has it.

Two layers, because only the second is a sandbox:

* **Argument checks** (``check_arguments``, always): every word after the program, and every
  part of a word a program may read as a path — the value after any ``=`` (``--file=x``,
  ``if=x``), the rest of a short option with its value glued on (``-o/x``, ``-f../x``, ``-rfx``),
  a response file (``@x``) — must be a workspace-relative path: not absolute, not ``~...``, no
  ``..`` segment, and not leading out through a symbolic link (resolved before the check). Words
  that are not paths pass, because as paths they would stay inside. When there is no OS
  confinement, the options with which a default-allowlist program follows links while it
  recurses (``grep -R``, ``ls -L``, ``diff -r``) are refused as well. This is a heuristic over
  what programs usually accept: it cannot know every program's syntax, and it cannot stop a
  program that runs code (an interpreter, ``git``, ``make``) or a link created after the check.

* **bubblewrap** (``bwrap``, when it works on this worker): the command runs in new namespaces
  (mount, pid, network, ipc, uts, user where possible) with every capability dropped. It sees
  the system directories (``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc``) and the program's
  own installation (e.g. ``~/.pyenv``, a virtualenv) read-only, a private empty ``/tmp`` and
  ``$HOME`` (in memory, gone when it ends), a minimal ``/dev``, its own ``/proc``, no network,
  and the workspace read-write, at the same path. Nothing else of the host exists for it, so a
  link leading out of the workspace dangles inside the sandbox, whatever program follows it.
  The sandbox dies with the process that started it (``--die-with-parent``), and all its
  processes die when its first one ends (the pid namespace ends).

* **An unprivileged user** when the worker runs as root: dropping capabilities inside a user
  namespace does not change the uid the host checks files against, so a root worker's command
  would still read root's files (``/etc/shadow``, ``/etc`` is visible). So bubblewrap itself is
  started through ``setpriv`` as a real unprivileged user, with no supplementary groups and no
  way to gain privileges: the workspace's owner when that is not root, otherwise
  ``SANDBOX_UID``/``SANDBOX_GID`` (``nobody``; ``TREADLE_SANDBOX_UID``/``_GID`` choose another).
  So that it can work in the workspace, the entries there that root owns (the workspace a root
  worker made, the files its tools wrote) are handed to that user before each command (the
  workspace directory and its ``.git`` stay root's, opened to the user's group, so git run by
  the root worker still trusts the repository); what the command creates is that user's,
  which the root worker reads and writes as before.

``Confinement`` chooses: ``auto`` (bubblewrap when a probe run works, otherwise argument checks
only, logged once), ``bwrap`` (refuse to run commands without it), ``off`` (argument checks only).
"""

from __future__ import annotations

import enum
import functools
import os
import shutil
import stat
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio import activity

from treadle.activities.errors import ToolError, WorkspaceEscapeError
from treadle.activities.tools.workspace import is_inside, resolve

__all__ = [
    "Confinement",
    "Sandbox",
    "check_arguments",
    "detect",
    "hand_over",
    "sandbox_ids",
    "sandboxed_argv",
    "workspace_ids",
]

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""What every sandboxed command sees read-only: programs, libraries and their configuration."""
PROGRAM_DIR_NAMES = frozenset({"bin", "sbin", "shims"})
"""A program found in a directory of one of these names brings that directory's parent into the
sandbox (``~/.pyenv/shims/python3`` -> ``~/.pyenv``), so its libraries come with it."""
SANDBOX_UID = 65534
SANDBOX_GID = 65534
"""Who a root worker's commands run as when the workspace is root's: ``nobody``/``nogroup``."""
PROBE_TIMEOUT_SECONDS = 10.0
MAX_LINK_HOPS = 40
MAX_INTERPRETER_DEPTH = 3
SHEBANG_BYTES = 256

# Options with which a program of the default allowlist follows symbolic links while it
# recurses, so a link in the workspace leads it out: (short letters, long options, an option
# that turns the following off). Refused only when commands are not OS-confined.
_LINK_FOLLOWING: Mapping[str, tuple[str, tuple[str, ...], str | None]] = {
    "grep": ("R", ("--dereference-recursive",), None),
    "ls": ("L", ("--dereference",), None),
    # diff -r follows links to directories unless told not to.
    "diff": ("r", ("--recursive",), "--no-dereference"),
}


class Confinement(enum.StrEnum):
    """How ``run_command`` confines a command beyond its argument checks."""

    AUTO = "auto"
    """bubblewrap when it works on this worker; otherwise argument checks only, logged once."""
    BWRAP = "bwrap"
    """bubblewrap or nothing: commands are refused on a worker where it does not work."""
    OFF = "off"
    """Argument checks only."""


@dataclass(frozen=True)
class Sandbox:
    """What this worker can offer: the bwrap executable that passed its probe, or why none."""

    bwrap: str | None
    reason: str


def detect(mode: Confinement) -> Sandbox:
    """The sandbox to run commands in under ``mode``; blocking (it may run a probe once)."""
    if mode is Confinement.OFF:
        return Sandbox(None, "OS confinement is off (Confinement.OFF)")
    found = shutil.which("bwrap")
    sandbox = _probe(found) if found else Sandbox(None, "bwrap (bubblewrap) is not installed")
    _announce(sandbox)
    if sandbox.bwrap is None and mode is Confinement.BWRAP:
        raise ToolError(
            f"this worker must confine commands with bubblewrap, which does not work here: "
            f"{sandbox.reason}"
        )
    return sandbox


@functools.cache
def _probe(bwrap: str) -> Sandbox:
    """Whether ``bwrap`` can build the sandbox here (user namespaces may be disabled), as the
    unprivileged user a root worker's commands run as."""
    try:
        drop = _drop_privileges(sandbox_ids())
    except ToolError as exc:
        return Sandbox(None, str(exc))
    argv = [bwrap, *_namespace_options(), *_system_mounts(), "--", *drop, "true"]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Sandbox(None, f"{bwrap} could not be run: {exc}")
    if done.returncode != 0:
        return Sandbox(None, f"{bwrap} failed its probe: {done.stderr.strip() or done.returncode}")
    return Sandbox(bwrap, f"commands run under {bwrap}")


_announced: set[Sandbox] = set()


def _announce(sandbox: Sandbox) -> None:
    """Log the choice once per worker process (and again only if it changes)."""
    if sandbox in _announced:
        return
    _announced.add(sandbox)
    if sandbox.bwrap:
        activity.logger.info("tool.command_confinement confined=true reason=%s", sandbox.reason)
    else:
        activity.logger.warning(
            "tool.command_confinement confined=false reason=%s: commands are not OS-confined; "
            "only their arguments are checked",
            sandbox.reason,
        )


def _namespace_options() -> list[str]:
    if os.geteuid() == 0:
        # Root needs no user namespace (one would keep the host's uid 0 for file access): the
        # other namespaces, every capability dropped but the two ``setpriv`` needs to become
        # the unprivileged user, which lose their effect as it does (uid 0 -> other).
        return [
            *("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"),
            "--unshare-cgroup-try",
            "--die-with-parent",
            *("--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"),
        ]
    return [
        "--unshare-all",  # mount, pid, net, ipc, uts, cgroup; user where it can
        "--die-with-parent",
        "--cap-drop",  # no capability reaches the command
        "ALL",
    ]


def _system_mounts() -> list[str]:
    mounts: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):  # /bin -> usr/bin on merged-/usr systems
            mounts += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            mounts += ["--ro-bind", path, path]
    # After the system mounts, before anything that may live under /tmp (the workspace).
    return [*mounts, "--perms", "1777", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"]


def sandboxed_argv(
    bwrap: str, root: Path, executable: str, argv: Sequence[str], env: Mapping[str, str]
) -> list[str]:
    """``argv`` wrapped in bubblewrap: ``root`` read-write, the rest of the host invisible.

    ``executable`` is where the worker found the program; its installation is made visible so
    the program starts, and inside the sandbox it is found on ``PATH`` as it would be outside.
    A root worker's command runs as an unprivileged user (see the module docstring).
    """
    as_root = os.geteuid() == 0
    # As root the mounts are made before the command drops to its user: what bubblewrap
    # creates must let that user through (it copies a 0700 parent's mode from the host).
    opened = ["--perms", "0777"] if as_root else []
    mounts: list[str] = []
    home = env.get("HOME", "")
    if os.path.isabs(home) and not any(_under(home, system) for system in ("/", *SYSTEM_PATHS)):
        # An empty home of its own, so tools that keep caches and settings there still work;
        # mounted first, so a program installed under the real home is mounted over it.
        mounts += [*opened, "--tmpfs", home]
    targets = [*_program_dirs(executable, env), os.fspath(root)]
    for index, directory in enumerate(targets):
        if as_root:
            mounts += _passable_parents(directory, home)
        bind = "--bind" if index == len(targets) - 1 else "--ro-bind"
        mounts += [bind, directory, directory]
    drop: list[str] = []
    if as_root:
        ids = workspace_ids(root)
        hand_over(root, ids)
        drop = _drop_privileges(ids)
    return [
        bwrap,
        *_namespace_options(),
        *_system_mounts(),
        *mounts,
        *("--chdir", os.fspath(root)),
        *("--setenv", "TMPDIR", "/tmp"),
        "--",
        *drop,
        *argv,
    ]


def _passable_parents(directory: str, home: str) -> list[str]:
    """``--dir`` for each parent of ``directory`` that the sandbox makes (not a system path,
    ``/tmp`` or the home it mounts), with a mode every user may pass through."""
    words: list[str] = []
    parents = Path(directory).parents
    for parent in reversed(parents):
        text = os.fspath(parent)
        if text in ("/", "/tmp", home) or any(_under(text, s) for s in SYSTEM_PATHS):
            continue
        words += ["--perms", "0755", "--dir", text]
    return words


def sandbox_ids(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """The unprivileged ``(uid, gid)`` for a root worker's commands in a workspace of root's."""
    environ = os.environ if environ is None else environ
    try:
        uid = int(environ.get("TREADLE_SANDBOX_UID", SANDBOX_UID))
        gid = int(environ.get("TREADLE_SANDBOX_GID", SANDBOX_GID))
    except ValueError as exc:
        raise ToolError(f"TREADLE_SANDBOX_UID/_GID must be numbers: {exc}") from None
    if uid <= 0 or gid <= 0:
        raise ToolError("TREADLE_SANDBOX_UID/_GID must name an unprivileged user, not root")
    return uid, gid


def workspace_ids(root: Path) -> tuple[int, int]:
    """Who a root worker's commands in ``root`` run as: its owner, unless that is root."""
    status = os.stat(root)
    if status.st_uid == 0:
        return sandbox_ids()
    return status.st_uid, status.st_gid if status.st_gid != 0 else status.st_uid


def hand_over(root: Path, ids: tuple[int, int]) -> None:
    """Give what root owns in the workspace to ``ids`` (links themselves, never their targets),
    so the unprivileged command can work on it; what others own is left alone.

    The workspace directory and its ``.git`` directory stay root's (git run by the root worker
    refuses a repository another user owns) and are opened to the group of ``ids`` instead."""
    uid, gid = ids
    keep = {os.fspath(root), os.path.join(root, ".git")}

    def give(path: str) -> None:
        try:
            status = os.lstat(path)
            if status.st_uid != 0:
                return
            if path in keep and stat.S_ISDIR(status.st_mode):
                if status.st_gid != gid:
                    os.chown(path, -1, gid)
                if status.st_mode & 0o070 != 0o070:
                    os.chmod(path, stat.S_IMODE(status.st_mode) | 0o070)
            else:
                os.lchown(path, uid, gid)
        except FileNotFoundError:
            pass

    give(os.fspath(root))
    for directory, subdirs, files in os.walk(root):
        for name in (*subdirs, *files):
            give(os.path.join(directory, name))


def _drop_privileges(ids: tuple[int, int]) -> list[str]:
    """The ``setpriv`` words that make a root worker's command a real unprivileged user (no
    supplementary groups, no way back up); none for a worker that is not root."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ToolError(
            "setpriv (util-linux) is not installed: a root worker cannot run commands as an "
            "unprivileged user without it"
        )
    uid, gid = ids
    return [
        setpriv,
        *(f"--reuid={uid}", f"--regid={gid}", "--clear-groups"),
        *("--no-new-privs", "--inh-caps=-all", "--"),
    ]


def _program_dirs(executable: str, env: Mapping[str, str]) -> list[str]:
    """The installation directories of the program at ``executable`` that the system paths do
    not already cover: its own, each link's on the way to its real file, and those of a
    script's interpreter (a virtualenv's ``bin/pytest`` needs the Python it links to). Never
    ``/`` or a home directory."""
    home = env.get("HOME")
    dirs: set[str] = set()
    for found in _program_files(executable, env, depth=0):
        directory = os.path.dirname(found)
        prefix = os.path.dirname(directory)
        if os.path.basename(directory) not in PROGRAM_DIR_NAMES or _too_wide(prefix, home):
            prefix = directory
        if _too_wide(prefix, home) or any(
            is_inside(prefix, Path(system)) for system in SYSTEM_PATHS
        ):
            continue
        dirs.add(prefix)
    # Outermost first, and nothing inside a directory that is already there.
    ordered = sorted(dirs, key=len)
    return [d for i, d in enumerate(ordered) if not any(is_inside(d, Path(o)) for o in ordered[:i])]


def _program_files(executable: str, env: Mapping[str, str], *, depth: int) -> set[str]:
    path = os.path.abspath(executable)
    files = {path, os.path.realpath(path)}
    for _ in range(MAX_LINK_HOPS):
        if not os.path.islink(path):
            break
        path = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
        files.add(path)
    interpreter = _interpreter(os.path.realpath(executable), env)
    if interpreter is not None and depth < MAX_INTERPRETER_DEPTH:
        files |= _program_files(interpreter, env, depth=depth + 1)
    return files


def _interpreter(script: str, env: Mapping[str, str]) -> str | None:
    """The interpreter a ``#!`` line names (through ``env``, as found on ``PATH``), if any."""
    try:
        with open(script, "rb") as handle:
            first = handle.readline(SHEBANG_BYTES)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) != "env":
        return words[0]
    named = [word for word in words[1:] if not word.startswith("-")]
    return shutil.which(named[0], path=env.get("PATH", os.defpath)) if named else None


def _under(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` itself or, for a directory other than ``/``, below it."""
    if directory == "/":
        return os.path.normpath(path) == "/"
    return is_inside(os.path.normpath(path), Path(directory))


def _too_wide(directory: str, home: str | None) -> bool:
    """``/``, a home directory or a parent of one: too much of the host to show a command."""
    if directory == "/":
        return True
    return home is not None and is_inside(os.path.abspath(home), Path(directory))


# --------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------


def check_arguments(root: Path, program: str, arguments: list[str], *, os_confined: bool) -> None:
    """Refuse any argument that could name a file outside the workspace (a heuristic).

    See the module docstring for the forms checked. ``root`` is the workspace's real path;
    this touches the file system (it reads links), so async callers run it in a thread.
    """
    for argument in arguments:
        for candidate, glued in _path_candidates(argument):
            # Which letters of -abc/x take a value is the program's business: any tail may be
            # one. Written as two words (-o sub/x), the value is unambiguous.
            hint = "; write a short option and its value as two words (-o path)" if glued else ""
            if candidate.startswith(("/", "~")) or ".." in candidate.split("/"):
                raise WorkspaceEscapeError(
                    f"argument {argument!r} leads outside the workspace; "
                    f"commands may only use workspace-relative paths{hint}"
                )
            try:
                resolve(root, candidate)
            except WorkspaceEscapeError:
                raise WorkspaceEscapeError(
                    f"argument {argument!r} leads outside the workspace through a symbolic "
                    "link; commands may only use paths inside the workspace"
                ) from None
    if not os_confined:
        _refuse_link_following(program, arguments)


def _path_candidates(argument: str) -> Iterable[tuple[str, bool]]:
    """The argument and every part of it that a program may take as a path; ``True`` marks
    the tails of a short option, whose value may be glued on after bundled flags."""
    yield argument, False
    for index, char in enumerate(argument):
        if char in "=@":  # --opt=path, name=path, key=val=path; @response-file
            yield argument[index + 1 :], False
    if argument.startswith("-") and not argument.startswith("--"):
        # -o/x, -f../x, -rf/x: every tail could be the value.
        for index in range(1, len(argument)):
            yield argument[index:], True


def _refuse_link_following(program: str, arguments: list[str]) -> None:
    if program not in _LINK_FOLLOWING:
        return
    letters, long_options, unless = _LINK_FOLLOWING[program]
    if unless is not None and unless in arguments:
        return
    for argument in arguments:
        name = argument.split("=", 1)[0]
        if name.startswith("--"):
            # getopt accepts any unambiguous abbreviation: --dereference-rec.
            hit = len(name) > 3 and any(option.startswith(name) for option in long_options)
        else:
            hit = name.startswith("-") and any(letter in name[1:] for letter in letters)
        if hit:
            raise WorkspaceEscapeError(
                f"argument {argument!r} makes {program} follow symbolic links, which may lead "
                "outside the workspace; this worker does not confine commands, so it is refused"
                + (f" (add {unless} to keep it)" if unless else "")
            )
