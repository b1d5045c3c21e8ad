"""``treadle memory``: a long-term memory namespace listed, searched and edited by hand, as the
runs with ``config.memory`` see it through their ``remember``, ``recall`` and ``forget`` tools.

    treadle memory list NAMESPACE [--json]
    treadle memory recall NAMESPACE [QUERY] [--limit N]
    treadle memory add NAMESPACE TEXT [--ttl-days D]
    treadle memory edit NAMESPACE ID TEXT
    treadle memory forget NAMESPACE ID
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from temporalio.client import Client

from treadle.cli import identity
from treadle.client import AgentClient
from treadle.workflows.memory.models import MemoryItem

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``memory`` and its commands (each sets ``handler``)."""
    memory = subparsers.add_parser(
        "memory", help="long-term memory across threads: list, recall, add, edit, forget"
    )
    commands = memory.add_subparsers(dest="memory_command", required=True)
    listed = commands.add_parser("list", help="every item of a namespace, oldest first")
    # Not ``namespace``: that is the Temporal namespace (``--namespace``).
    listed.add_argument("memory", metavar="NAMESPACE", help="e.g. user:alice/agent:coder")
    listed.add_argument("--json", action="store_true")
    listed.set_defaults(handler=cmd_list)
    recall = commands.add_parser("recall", help="the items that match keywords, best first")
    recall.add_argument("memory", metavar="NAMESPACE")
    recall.add_argument("query", nargs="?", default="")
    recall.add_argument("--limit", type=int, default=5)
    recall.add_argument("--json", action="store_true")
    recall.set_defaults(handler=cmd_recall)
    add = commands.add_parser("add", help="add an item (a worker must poll the task queue)")
    add.add_argument("memory", metavar="NAMESPACE")
    add.add_argument("text")
    add.add_argument("--ttl-days", type=float, help="forget it after this many days")
    add.set_defaults(handler=cmd_add)
    edit = commands.add_parser("edit", help="replace an item's text")
    edit.add_argument("memory", metavar="NAMESPACE")
    edit.add_argument("id", help="the item's id, e.g. m3")
    edit.add_argument("text")
    edit.set_defaults(handler=cmd_edit)
    forget = commands.add_parser("forget", help="remove an item")
    forget.add_argument("memory", metavar="NAMESPACE")
    forget.add_argument("id")
    forget.set_defaults(handler=cmd_forget)


def _line(item: MemoryItem) -> str:
    until = f"  (until {item.expires_at:%Y-%m-%d %H:%M} UTC)" if item.expires_at else ""
    return f"{item.id}: {item.text}{until}"


def _show(items: tuple[MemoryItem, ...], as_json: bool, empty: str) -> int:
    if as_json:
        print(json.dumps([i.model_dump(mode="json") for i in items], indent=2))
    else:
        print("\n".join(_line(i) for i in items) if items else empty)
    return 0


async def cmd_list(client: Client, args: argparse.Namespace) -> int:
    items = await AgentClient(client).memory_items(args.memory)
    return _show(items, args.json, f"memory {args.memory!r} holds nothing")


async def cmd_recall(client: Client, args: argparse.Namespace) -> int:
    items = await AgentClient(client).recall(args.memory, args.query, limit=args.limit)
    return _show(items, args.json, "no memories match")


async def cmd_add(client: Client, args: argparse.Namespace) -> int:
    agents = AgentClient(client, task_queue=args.task_queue)
    item = await agents.remember(
        args.memory, args.text, ttl_days=args.ttl_days, by=identity.default_name()
    )
    print(_line(item))
    return 0


async def cmd_edit(client: Client, args: argparse.Namespace) -> int:
    item = await AgentClient(client).edit_memory(
        args.memory, args.id, args.text, by=identity.default_name()
    )
    print(_line(item))
    return 0


async def cmd_forget(client: Client, args: argparse.Namespace) -> int:
    item = await AgentClient(client).forget(args.memory, args.id)
    print(f"forgot {_line(item)}")
    return 0
