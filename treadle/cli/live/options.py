"""The flags that say what this client answers (approvals, file reads, environment variables,
questions), and the ``Responder`` they make."""

from __future__ import annotations

import argparse
from pathlib import Path

from treadle.cli import identity
from treadle.cli.client_answers import ClientPolicy, looks_secret
from treadle.cli.live.responder import Prompter, Responder
from treadle.cli.live.views import View
from treadle.client import AgentClient

__all__ = ["add_client_options", "policy_from", "responder_for", "warn_secret_env"]


def add_client_options(parser: argparse.ArgumentParser, *, interactive: bool = True) -> None:
    """The flags that say what this client answers: approvals and client queries."""
    if interactive:
        parser.add_argument(
            "--interactive",
            action="store_true",
            help="ask here about calls waiting for approval and stuck runs",
        )
    parser.add_argument(
        "--allow-reads",
        action="store_true",
        help="answer the run's file reads from this directory without asking",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="an environment variable the run may read (repeatable; never *KEY*/*TOKEN*/...)",
    )
    identity.add_as_option(parser)
    leave = parser.add_mutually_exclusive_group()
    leave.add_argument(
        "--no-answer",
        action="store_true",
        help="leave the run's client queries to another client",
    )
    leave.add_argument(
        "--decline-queries",
        action="store_true",
        help="decline the client queries this client cannot answer (no terminal to ask, no "
        "--allow-reads / --env for them) instead of leaving them to another client",
    )


def policy_from(args: argparse.Namespace) -> ClientPolicy | None:
    if getattr(args, "no_answer", False):
        return None
    return ClientPolicy(
        root=Path.cwd(),
        allow_reads=bool(getattr(args, "allow_reads", False)),
        env=tuple(getattr(args, "env", None) or ()),
        decline=bool(getattr(args, "decline_queries", False)),
    )


def warn_secret_env(args: argparse.Namespace, view: View) -> None:
    for name in getattr(args, "env", None) or ():
        if looks_secret(name):
            view.say(f"--env {name}: never shared (its name looks like a secret)")


def responder_for(
    client: AgentClient,
    workflow_id: str,
    view: View,
    args: argparse.Namespace,
    *,
    can_ask: bool,
) -> Responder:
    interactive = bool(getattr(args, "interactive", False))
    asking = can_ask or interactive
    return Responder(
        client=client,
        run_id=workflow_id,
        view=view,
        prompter=Prompter(view) if asking else None,
        interactive=interactive,
        policy=policy_from(args),
        decided_by=identity.decided_by(args),
    )
