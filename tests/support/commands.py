"""Finding a command's processes from outside, by a marker word on their command line.

Under bubblewrap a command sees its own pid namespace, so a pid it prints means nothing on the
host; its command line, read from the host's /proc, identifies it in either case.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

from treadle.activities.tools.confinement import Confinement, detect

BWRAP_WORKS = shutil.which("bwrap") is not None and detect(Confinement.AUTO).bwrap is not None
"""Whether bubblewrap confines commands on this machine (.ci/run installs it)."""


def marker() -> str:
    """A word to put on a command line so its processes can be found."""
    return f"treadle-test-{uuid.uuid4().hex[:12]}"


def pids_with(word: str) -> set[int]:
    """Live (not zombie) processes whose command line contains ``word`` as one argument."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X") and any(word.encode() in arg for arg in argv):
            found.add(int(entry.name))
    return found


def gone_within(pids: set[int], seconds: float) -> bool:
    """Whether every process in ``pids`` exits (or is left only as a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
