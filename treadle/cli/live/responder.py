"""Asking the user, and answering the run: approvals and guidance (``--interactive``) through
the ``decide`` update, client queries through ``answer_query`` by the policy in
``client_answers``. What waits is always read from the run's ``state`` query, never from an
event (anyone who may signal the run can publish on its stream)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from treadle.cli import identity
from treadle.cli.client_answers import (
    ClientPolicy,
    Declined,
    PathRefused,
    Reply,
    Shared,
    confine,
    environment_reply,
    read_reply,
    redact,
    secret_declined,
    secret_path,
    secret_values,
)
from treadle.cli.live.views import View
from treadle.cli.shell import runnable
from treadle.client import AgentClient, AgentClientError, Refused
from treadle.client.describe import describe_query, short
from treadle.workflows.agent.messages.events import (
    MAX_DECLINE_CHARS,
    AgentEvent,
    ClientAnswer,
    ClientQuery,
    answer_commands,
)
from treadle.workflows.agent.messages.models import AgentStatus, Decision, PendingApproval
from treadle.workflows.agent.messages.state_machine import State

__all__ = ["Prompter", "Responder"]


class Prompter:
    """Asks the user one line at a time (``None`` at the end of input)."""

    def __init__(self, view: View) -> None:
        self.view = view

    async def ask(self, question: str) -> str | None:
        with self.view.paused():
            return await asyncio.to_thread(self._read, question)

    def _read(self, question: str) -> str | None:
        out = self.view.prompt_file
        if sys.stdin.isatty() and out is sys.stdout:
            try:
                return input(question).strip()
            except EOFError:
                return None
        out.write(question)
        out.flush()
        line = sys.stdin.readline()
        if not sys.stdin.isatty():
            # Nothing echoed what was read: show it, and end the prompt's line.
            out.write(line if line.endswith("\n") else line + "\n")
            out.flush()
        return line.strip() if line else None


@dataclass
class Responder:
    """Acts on what a run waits for: approvals and guidance (``interactive``), and client
    queries (``policy``; ``None`` leaves them to another client).

    An event on the stream is only a trigger: anyone who may signal a run can publish items on
    its stream, so what waits (the call, its arguments, the query) is read from the run's own
    ``state`` query each time. A query this client has no one to ask about and no flag to
    answer (``--allow-reads``, ``--env``) is left to another client or ``treadle answer``,
    saying so, unless ``--decline-queries``."""

    client: AgentClient
    run_id: str
    view: View
    prompter: Prompter | None = None
    """``None``: no one to ask (not a terminal, no ``--interactive``)."""
    interactive: bool = False
    policy: ClientPolicy | None = None
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    handled: set[str] = field(default_factory=set)
    decided_by: str = field(default_factory=identity.default_name)
    """Who the decisions and answers sent from here come from (``--as NAME``, else
    ``USER@HOST``): attribution, as ``approve --as`` records it."""

    async def on_event(self, event: AgentEvent) -> None:
        if event.subagent is not None:
            return  # a sub-agent's event: its approvals reach us as this run's own
        if event.kind == "approval_needed" and self.interactive and event.call_id:
            await self._approval(event.call_id)
        elif event.kind == "guidance_needed" and self.interactive:
            await self._guidance(event.step)
        elif event.kind == "client_query":
            await self._client_query(event.query)

    async def on_attach(self, status: AgentStatus) -> None:
        """What was already waiting when the view attached."""
        if self.interactive:
            for pending in status.pending_approvals:
                await self._approval(pending.call_id)
            if status.state is State.WAITING_FOR_HUMAN and not status.pending_approvals:
                await self._guidance(status.step)
        if status.client_query is not None:
            await self._client_query(status.client_query)
        for query in status.child_queries:  # a sub-agent's, answered through this run
            await self._client_query(query)

    # -- approvals and guidance ---------------------------------------------------------------

    async def _approval(self, call_id: str) -> None:
        if call_id in self.handled or self.prompter is None:
            return
        self.handled.add(call_id)
        pending = await self._pending(call_id)
        while pending is not None:  # None: decided (a replay from the start, another client)
            # The tool and arguments as the run holds them, not as an event said.
            arguments = short(json.dumps(pending.arguments), 200)
            choice = await self.prompter.ask(
                f"{pending.tool} {arguments} ({call_id}): approve, reject, modify, or skip? "
                "[a/r/m/s] "
            )
            if choice is None or choice.lower() in ("s", "skip", ""):
                return
            decision = await self._decision(choice.lower(), call_id, pending.arguments)
            if decision is not None and await self._decide(decision):
                return
            pending = await self._pending(call_id)

    async def _pending(self, call_id: str) -> PendingApproval | None:
        status = await self._status()
        waiting = status.pending_approvals if status is not None else ()
        return next((p for p in waiting if p.call_id == call_id), None)

    async def _decision(
        self, choice: str, call_id: str, arguments: dict[str, Any]
    ) -> Decision | None:
        assert self.prompter is not None
        if choice in ("a", "approve"):
            return Decision(action="approve", call_id=call_id, decided_by=self.decided_by)
        if choice in ("r", "reject"):
            reason = await self.prompter.ask("reason (the model reads it): ")
            if not reason:
                self.view.say("a rejection needs a reason")
                return None
            return Decision(
                action="reject", call_id=call_id, reason=reason, decided_by=self.decided_by
            )
        if choice in ("m", "modify"):
            text = await self.prompter.ask(
                f"new arguments as a JSON object (now {short(json.dumps(arguments), 300)}): "
            )
            try:
                new = json.loads(text or "")
            except json.JSONDecodeError as exc:
                self.view.say(f"not JSON: {exc.msg} at position {exc.pos}")
                return None
            if not isinstance(new, dict):
                self.view.say("the arguments must be a JSON object")
                return None
            return Decision(
                action="modify", call_id=call_id, arguments=new, decided_by=self.decided_by
            )
        self.view.say("answer a, r, m or s")
        return None

    async def _guidance(self, step: int) -> None:
        key = f"guidance@{step}"
        if key in self.handled or self.prompter is None:
            return
        self.handled.add(key)
        while await self._wants_guidance():
            choice = await self.prompter.ask(
                "stuck: guide the model, halt the run, or skip? [g/h/s] "
            )
            if choice is None or choice.lower() in ("s", "skip", ""):
                return
            if choice.lower() in ("g", "guide"):
                text = await self.prompter.ask("guidance for the model: ")
                if not text:
                    continue
                decision = Decision(action="guide", guidance=text, decided_by=self.decided_by)
            elif choice.lower() in ("h", "halt"):
                reason = await self.prompter.ask("why (optional): ")
                decision = Decision(
                    action="guide", halt=True, reason=reason or None, decided_by=self.decided_by
                )
            else:
                self.view.say("answer g, h or s")
                continue
            if await self._decide(decision):
                return

    async def _wants_guidance(self) -> bool:
        status = await self._status()
        if status is None or status.state is not State.WAITING_FOR_HUMAN:
            return False
        return not status.pending_approvals

    async def _decide(self, decision: Decision) -> bool:
        """Send one decision; says why when the run refuses it (then the user is asked again)."""
        try:
            await self.client.decide(self.run_id, decision)
        except Refused as exc:
            self.view.say(f"the run refused it: {exc.reason}")
            return False
        except AgentClientError as exc:
            self.view.say(f"the run did not take it: {exc}")
            return False
        return True

    # -- client queries -----------------------------------------------------------------------

    async def _client_query(self, announced: ClientQuery | None) -> None:
        """Answer the query the run's status holds (``announced``, an event's copy, is only a
        trigger: the status says what is asked, or that nothing is)."""
        if self.policy is None:
            return
        status = await self._status()
        query = status.client_query if status is not None else None
        if status is not None and announced is not None and "/" in announced.id:
            # A sub-agent's, which this run takes answers for (``call_1/q1``).
            query = next((q for q in status.child_queries if q.id == announced.id), None)
        if query is None:
            return  # answered already, timed out, or never asked by the run
        key = f"{query.id}@{query.asked_at.isoformat()}"
        if key in self.handled:
            return
        self.handled.add(key)
        if (
            announced is not None
            and announced.id == query.id
            and (announced.kind, announced.what) != (query.kind, query.what)
        ):
            self.view.say(
                f"the stream's copy of {query.id} is not what the run asks; answering the run: "
                f"{describe_query(query)}"
            )
        reply = await self._reply(self.policy, query)
        if reply is None:
            self.view.say(self._left(query))
            return
        answer = _answer(query, reply, self.decided_by)
        refusal = await self._send_answer(answer)
        if refusal is not None and answer.content is not None:
            # Too long for this run, say: tell the model why instead of leaving it waiting.
            refusal = await self._send_answer(_answer(query, Declined(refusal), self.decided_by))
        if refusal is not None:
            self.view.say(f"the run refused the answer to {query.id}: {refusal}")

    async def _reply(self, policy: ClientPolicy, query: ClientQuery) -> Reply | None:
        """The answer, or ``None`` to leave the query to another client (no one here to ask,
        no flag that answers it, no ``--decline-queries``)."""
        secrets = secret_values(self.environ)
        if query.kind == "environment":
            if not policy.env:
                if self.prompter is None and not policy.decline:
                    return None
                return Declined(
                    "the client shares no environment variables (it would name them with "
                    "--env NAME)"
                )
            return _redacted(environment_reply(query.what, policy.env, self.environ), secrets)
        if query.kind == "question":
            if self.prompter is None:
                if not policy.decline:
                    return None
                return Declined("no one at the client can answer questions (not a terminal)")
            text = await self.prompter.ask(f"the run asks: {query.what}\nyour answer: ")
            return Shared(redact(text, secrets)) if text else Declined("the user gave no answer")
        return await self._file(policy, query.what, secrets)

    async def _file(
        self, policy: ClientPolicy, what: str, secrets: tuple[str, ...]
    ) -> Reply | None:
        if self.prompter is None and not policy.allow_reads:
            if not policy.decline:
                return None
            return Declined("the client shares files only with its user's consent or --allow-reads")
        try:
            path = confine(policy.root, what)
        except PathRefused as exc:
            return Declined(str(exc))
        secret = secret_path(policy.root, what)
        if self.prompter is None or (secret is None and policy.allow_reads):
            # --allow-reads answers without asking, but never sends what looks like a secret.
            if secret is not None:
                return Declined(secret_declined(what, secret))
            return await asyncio.to_thread(read_reply, policy, what, redacting=secrets)
        size = path.stat().st_size if path.is_file() else None
        about = f" ({size} bytes)" if size is not None else ""
        if secret is None:
            question = f"the run asks to read {what}{about} from {policy.root}; send it? [y/N] "
        else:
            question = (
                f"the run asks to read {what}{about} from {policy.root}. It LOOKS LIKE A SECRET "
                f"(it matches {secret}): sent, it stays in the run's history and goes to the "
                "model. Send it anyway? [y/N] "
            )
        consent = await self.prompter.ask(question)
        if (consent or "").lower() not in ("y", "yes"):
            return Declined(f"the user declined to share {what}")
        return await asyncio.to_thread(
            read_reply, policy, what, secret_ok=secret is not None, redacting=secrets
        )

    def _left(self, query: ClientQuery) -> str:
        flag = {"file_read": " and no --allow-reads", "environment": " and no --env"}
        command = runnable(answer_commands(self.run_id, query)[0])
        return (
            f"{query.id} ({describe_query(query)}) is left to another client: no one here to "
            f"ask{flag.get(query.kind, '')} (--decline-queries declines instead). "
            f"Answer it with: {command}"
        )

    async def _send_answer(self, answer: ClientAnswer) -> str | None:
        """Why the run did not take the answer, or ``None`` when it did."""
        try:
            await self.client.answer(self.run_id, answer)
        except Refused as exc:
            return exc.reason
        except AgentClientError as exc:
            return str(exc)
        return None

    async def _status(self) -> AgentStatus | None:
        try:
            return await self.client.status(self.run_id)
        except AgentClientError:
            return None


def _answer(query: ClientQuery, reply: Reply, decided_by: str | None = None) -> ClientAnswer:
    if isinstance(reply, Shared):
        return ClientAnswer(
            query_id=query.id, kind=query.kind, content=reply.content, decided_by=decided_by
        )
    reason = reply.reason[:MAX_DECLINE_CHARS]
    return ClientAnswer(query_id=query.id, kind=query.kind, declined=reason, decided_by=decided_by)


def _redacted(reply: Reply, secrets: tuple[str, ...]) -> Reply:
    return Shared(redact(reply.content, secrets)) if isinstance(reply, Shared) else reply
