"""Who is deciding: ``--as NAME`` on ``approve``, ``reject``, ``modify``, ``guide`` and
``answer``, by default the OS user and host (``alice@laptop``).

The name travels in the decision's body (``decided_by``) and is shown in the run's trace,
``status`` and stream. It is attribution, not authentication: anyone who can signal the run can
write any name; who may signal it at all is the Temporal server's authorizer's job.
"""

from __future__ import annotations

import argparse
import getpass
import socket


def default_name() -> str:
    """``user@host`` of this process; ``someone@host`` where the OS knows no user name."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        user = "someone"
    return f"{user}@{socket.gethostname()}"


def add_as_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--as",
        dest="decided_by",
        metavar="NAME",
        help="who decides, as the run records it (default: USER@HOST)",
    )


def decided_by(args: argparse.Namespace) -> str:
    """``--as NAME``, or this process's ``user@host``."""
    name: str | None = getattr(args, "decided_by", None)
    return name if name else default_name()
