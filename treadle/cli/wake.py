"""``treadle wake ID [--reason TEXT]``: end the wait of a run the ``wait`` tool parked
(``Waiting``) now, instead of when its timer fires; the model reads the reason."""

from __future__ import annotations

import argparse
from typing import Any

from temporalio.client import Client

from treadle.client import AgentClient

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``wake`` (sets ``handler``)."""
    wake = subparsers.add_parser("wake", help="end a run's wait (the wait tool) now")
    wake.add_argument("workflow_id")
    wake.add_argument("--reason", default="", help="why it wakes (the model reads it)")
    wake.set_defaults(handler=cmd_wake)


async def cmd_wake(client: Client, args: argparse.Namespace) -> int:
    woken = await AgentClient(client).wake(args.workflow_id, args.reason)
    when = woken.would_have_woken_at
    later = f" (it would have woken at {when:%Y-%m-%d %H:%M:%S} UTC)" if when else ""
    print(f"woke run {args.workflow_id}{later}")
    return 0
