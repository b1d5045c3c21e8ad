"""Nexora's progress tracker: tell a long productive run from a stuck loop, phase by phase.

Pure and deterministic, because it runs inside the workflow: no I/O, no clock (the caller passes
``workflow.now()``), no randomness, no sets iterated (string hashing differs between worker
processes). Its whole state is one pydantic model, so continue-as-new can carry it.

``check()`` reports the first of these that holds, as a sentence naming the file, error or pair:

1. **Repeated error** - the same target failed with the same normalised error
   ``stuck_threshold`` times in a row; any success (a call on any target, or a passing test)
   ends the run of errors. Errors are compared after lowercasing, collapsing whitespace, removing
   quotes and replacing numbers, hex and uuid-like runs, so ``line 12`` and ``line 13`` match.
2. **Oscillation** - the last ``oscillation_window`` successful writes to files alternate between
   two files A, B, A, B. Reads, failures, commands and tests are not writes, so an
   edit/test/edit/test loop is ordinary work.
3. **No progress** - among the last ``progress_window`` actions (tool calls and tests since the
   last reset) fewer than ``min_progress`` count as progress: distinct targets of successful
   writes that changed something (a file written with the hash it already had did not; a command
   whose output hash equals its last run in the window did not; an unknown hash did), distinct
   targets explored (a read or listing of a target not read before in the run, or whose content
   hash differs from the last read of it; re-reading what was already seen is not progress) plus
   passing tests.
4. **Empty replies** - ``record_reply`` saw ``max_empty_replies`` replies in a row with no text
   and no tool call (the caller asks right after the reply, since no tool call follows one).
5. **Repeated message** - ``record_message`` saw a verbatim repeat of one of the model's last
   ``message_dedup_window`` messages; the reason stays latched until the next reset.

``reset_after_recovery()`` and ``start_phase()`` clear the error run, the recent actions and
errors, the run of empty replies and the latch, so the model gets a fresh window; files
modified, reads seen and test history are kept.

The windowed rules need of an action only its kind, whether it succeeded and changed something,
which target it was (to count distinct ones) and, for a command, which output it saw (to tell a
repeat). So ``recent_actions`` keeps each as a *mark* of about 20 characters (``_Mark``): those
facts, with the target and the output as 64-bit digests. Equal targets have equal digests, so
every rule decides as it would on the paths themselves, before a hand-over and after it, and a
wide window (``max_recent_actions`` up to 1,000) crosses continue-as-new in ~25 bytes an action
instead of the ~130 of the whole record.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from treadle.workflows.agent.messages.progress import (
    ActionKind,
    ActionRecord,
    ErrorRecord,
    PhaseOrderError,
    PhaseRecord,
    ProgressConfig,
    ProgressSummary,
    TestRecord,
)

__all__ = ["ProgressTracker", "normalise_error"]

_SHORT = 120
_T = TypeVar("_T")
_MAX_BLOCKERS = 10


class _Phase(BaseModel):
    """The phase in progress (mutable; becomes a ``PhaseRecord`` when it completes)."""

    model_config = ConfigDict(extra="forbid")

    number: int
    description: str
    started_at: datetime
    expected_minutes: float | None = None
    tool_calls: int = 0
    tests_passed: int = 0
    files_changed: list[str] = Field(default_factory=list)
    open_errors: dict[str, str] = Field(default_factory=dict)
    """target -> latest error text, for targets that have not succeeded since."""

    def record(self, now: datetime, success: bool | None) -> PhaseRecord:
        blockers = tuple(f"{t}: {e}" for t, e in self.open_errors.items())[-_MAX_BLOCKERS:]
        return PhaseRecord(
            number=self.number,
            description=self.description,
            started_at=self.started_at,
            finished_at=now,
            duration_seconds=(now - self.started_at).total_seconds(),
            expected_minutes=self.expected_minutes,
            files_changed=tuple(sorted(self.files_changed)),
            tests_passed=self.tests_passed,
            tool_calls=self.tool_calls,
            blockers=blockers,
            success=not blockers if success is None else success,
        )

    def fail(self, target: str, text: str) -> None:
        # Re-insert so the most recent failures are the ones kept as blockers.
        self.open_errors.pop(target, None)
        self.open_errors[target] = text


class ProgressTracker(BaseModel):
    """Everything the progress check knows; mutate it only through its methods."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    config: ProgressConfig = Field(default_factory=ProgressConfig)
    total_phases: int | None = None
    tool_calls: int = 0
    files_modified: dict[str, str | None] = Field(default_factory=dict)
    """path -> content hash of the last successful write (``None`` when unknown)."""
    files_modified_earlier: int = 0
    """Files left out of ``files_modified`` at hand-overs (only the latest are carried)."""
    seen_reads: dict[str, str | None] = Field(default_factory=dict)
    """target -> content hash of its last successful read or listing (``None`` when unknown),
    oldest first: what the run has already explored."""
    tests_passed: int = 0
    tests_failed: int = 0
    test_history: list[TestRecord] = Field(default_factory=list)
    recent_actions: list[str] = Field(default_factory=list)
    """The last ``max_recent_actions`` tool calls and tests, oldest first, as marks
    (``_Mark``: what the windowed rules read of each, in about 20 characters)."""
    recent_errors: list[ErrorRecord] = Field(default_factory=list)
    recent_writes: list[str] = Field(default_factory=list)
    """Targets of the last successful file writes, for the oscillation rule (reads between
    writes must not push them out of view)."""
    recent_messages: list[str] = Field(default_factory=list)
    """sha256 of the model's last messages (stripped)."""
    error_run_target: str | None = None
    error_run_hash: str | None = None
    error_run_text: str = ""
    error_run_count: int = 0
    message_latch: str | None = None
    empty_replies: int = 0
    """Replies in a row with no text and no tool call."""
    phase: _Phase | None = None
    phases: list[PhaseRecord] = Field(default_factory=list)
    last_report_at: int = 0

    @field_validator("recent_actions", mode="before")
    @classmethod
    def _marks(cls, value: Any) -> Any:
        """Whole records (a tracker carried by a run from before marks) become marks: the
        same facts, so the rules decide as they did."""
        if not isinstance(value, list):
            return value
        return [
            item if isinstance(item, str) else _mark(ActionRecord.model_validate(item))
            for item in value
        ]

    # ---------------------------------------------------------------------------------------
    # Recording
    # ---------------------------------------------------------------------------------------

    def record_tool_call(
        self,
        tool: str,
        target: str,
        *,
        success: bool,
        error: str | None = None,
        mutating: bool,
        content_hash: str | None = None,
    ) -> None:
        """Record one tool call; ``target`` is the file path or the command.

        ``content_hash`` is the hash of what a file write left on disk, of a command's output, or
        of what a read saw.
        """
        self.tool_calls += 1
        if self.phase is not None:
            self.phase.tool_calls += 1
        if not mutating:
            kind = ActionKind.READ_ONLY
        elif tool in self.config.command_tools:
            kind = ActionKind.COMMAND
        else:
            kind = ActionKind.FILE_WRITE

        if not success:
            self._record_failure(kind, tool, target, error or "")
            return

        self._end_error_run()
        if self.phase is not None:
            self.phase.open_errors.pop(target, None)
        changed = False
        if kind is ActionKind.FILE_WRITE:
            changed = content_hash is None or self.files_modified.get(target, "") != content_hash
            self.files_modified[target] = content_hash
            _push(self.recent_writes, target, self.config.oscillation_window)
            if self.phase is not None and target not in self.phase.files_changed:
                self.phase.files_changed.append(target)
        elif kind is ActionKind.READ_ONLY:
            changed = self._explored(target, content_hash) and self.config.exploration_is_progress
        elif kind is ActionKind.COMMAND:
            seen = _Mark.of(kind, True, False, target, content_hash)
            changed = content_hash is None or not any(
                a.kind is ActionKind.COMMAND
                and a.success
                and (a.target, a.content) == (seen.target, seen.content)
                for a in map(_Mark.parse, self.recent_actions)
            )
        self._push_action(
            ActionRecord(
                kind=kind,
                tool=tool,
                target=target,
                success=True,
                changed=changed,
                content_hash=content_hash,
            )
        )

    def record_test(self, command: str, *, passed: bool, output: str = "") -> None:
        """Record a test run; a passing one is progress and ends a run of errors."""
        lines = [line for line in output.splitlines() if line.strip()]
        _push(
            self.test_history,
            TestRecord(
                command=command,
                passed=passed,
                output=_shorten(lines[-1]) if lines else "",
                phase=self.phase.number if self.phase else None,
            ),
            self.config.max_test_history,
        )
        if passed:
            self.tests_passed += 1
            self._end_error_run()
            if self.phase is not None:
                self.phase.tests_passed += 1
                self.phase.open_errors.pop(command, None)
        else:
            self.tests_failed += 1
            if self.phase is not None:
                self.phase.fail(command, _shorten(lines[-1]) if lines else "tests failed")
        self._push_action(
            ActionRecord(kind=ActionKind.TEST, tool="test", target=command, success=passed)
        )

    def record_reply(self, *, empty: bool) -> str | None:
        """Record whether the model's reply was empty (no text, no tool call); the reason when
        ``max_empty_replies`` came in a row."""
        self.empty_replies = self.empty_replies + 1 if empty else 0
        return self._empty_replies()

    def record_message(self, text: str) -> str | None:
        """Record the model's own message; a reason when it repeats a recent one verbatim."""
        stripped = text.strip()
        if not stripped:
            return None
        digest = hashlib.sha256(stripped.encode()).hexdigest()
        reason = None
        if digest in self.recent_messages:
            window = self.config.message_dedup_window
            reason = (
                f"The model repeated one of its last {window} messages verbatim: "
                f"'{_shorten(stripped)}'"
            )
            self.message_latch = reason
        _push(self.recent_messages, digest, self.config.message_dedup_window)
        return reason

    # ---------------------------------------------------------------------------------------
    # Checking and recovering
    # ---------------------------------------------------------------------------------------

    def check(self) -> str | None:
        """Why the run is stuck, as a sentence naming the file, error or pair; else ``None``."""
        return (
            self._repeated_error()
            or self._oscillation()
            or self._no_progress()
            or self._empty_replies()
            or self.message_latch
        )

    def stuck_kind(self) -> str:
        """Which rule says the run is stuck, as a short name for metrics (few distinct values,
        where ``check`` is a sentence): ``repeated_error``, ``oscillation``, ``no_progress``,
        ``empty_replies`` or ``repeated_message``."""
        if self._repeated_error():
            return "repeated_error"
        if self._oscillation():
            return "oscillation"
        if self._no_progress():
            return "no_progress"
        if self._empty_replies():
            return "empty_replies"
        return "repeated_message"

    def reset_after_recovery(self) -> None:
        """Start a fresh window after the model was told what repeats (keeps files and tests)."""
        self._end_error_run()
        self.recent_actions.clear()
        self.recent_errors.clear()
        self.recent_writes.clear()
        self.message_latch = None
        self.empty_replies = 0

    def should_report(self) -> bool:
        """True once per ``progress_report_every`` tool calls (even when several arrive at once)."""
        every = self.config.progress_report_every
        if self.tool_calls - self.last_report_at < every:
            return False
        self.last_report_at = self.tool_calls - self.tool_calls % every
        return True

    # ---------------------------------------------------------------------------------------
    # Phases
    # ---------------------------------------------------------------------------------------

    def start_phase(
        self,
        number: int,
        description: str,
        now: datetime,
        expected_minutes: float | None = None,
        *,
        total: int | None = None,
    ) -> PhaseRecord | None:
        """Start phase ``number``; returns the record of the phase it completes, if any."""
        last = self.phase or (self.phases[-1] if self.phases else None)
        if last is not None and number <= last.number:
            raise PhaseOrderError(
                f"cannot start phase {number} after phase {last.number}: "
                "phase numbers must increase"
            )
        completed = self.complete_phase(now)
        if total is not None:
            self.total_phases = total
        self.phase = _Phase(
            number=number,
            description=description,
            started_at=now,
            expected_minutes=expected_minutes,
        )
        self.reset_after_recovery()
        return completed

    def complete_phase(self, now: datetime, success: bool | None = None) -> PhaseRecord | None:
        """End the current phase (success defaults to: no blockers); ``None`` without one."""
        if self.phase is None:
            return None
        record = self.phase.record(now, success)
        self.phases.append(record)
        self.phase = None
        return record

    def summary(self, now: datetime, started_at: datetime) -> ProgressSummary:
        """Total progress across phases, for ``status`` and the progress log event."""
        return ProgressSummary(
            phases_completed=len(self.phases),
            total_phases=self.total_phases,
            current_phase=self.phase.number if self.phase else None,
            current_phase_description=self.phase.description if self.phase else None,
            files_modified=len(self.files_modified) + self.files_modified_earlier,
            tool_calls=self.tool_calls,
            tests_passed=self.tests_passed,
            tests_failed=self.tests_failed,
            recent_successes=sum(_Mark.parse(a).success for a in self.recent_actions),
            recent_failures=sum(not _Mark.parse(a).success for a in self.recent_actions),
            elapsed_seconds=(now - started_at).total_seconds(),
        )

    # ---------------------------------------------------------------------------------------
    # Internals
    # ---------------------------------------------------------------------------------------

    def _record_failure(self, kind: ActionKind, tool: str, target: str, error: str) -> None:
        error_hash = _hash(normalise_error(error))
        text = _shorten(error) or "(no error text)"
        if self.error_run_target == target and self.error_run_hash == error_hash:
            self.error_run_count += 1
        else:
            self.error_run_target, self.error_run_hash, self.error_run_count = target, error_hash, 1
        self.error_run_text = text
        _push(
            self.recent_errors,
            ErrorRecord(tool=tool, target=target, error_hash=error_hash, text=text),
            self.config.max_recent_errors,
        )
        if self.phase is not None:
            self.phase.fail(target, text)
        self._push_action(
            ActionRecord(kind=kind, tool=tool, target=target, success=False, error_hash=error_hash)
        )

    def _explored(self, target: str, content_hash: str | None) -> bool:
        """Whether this read saw something new, remembering what it saw."""
        seen = target in self.seen_reads
        new = not seen or (content_hash is not None and self.seen_reads[target] != content_hash)
        # Re-insert so the targets read longest ago are the ones forgotten first.
        self.seen_reads.pop(target, None)
        self.seen_reads[target] = content_hash
        for old in list(self.seen_reads)[: -self.config.max_seen_reads]:
            del self.seen_reads[old]
        return new

    def _end_error_run(self) -> None:
        self.error_run_target = self.error_run_hash = None
        self.error_run_text = ""
        self.error_run_count = 0

    def _push_action(self, action: ActionRecord) -> None:
        _push(self.recent_actions, _mark(action), self.config.max_recent_actions)

    def _repeated_error(self) -> str | None:
        if self.error_run_count < self.config.stuck_threshold:
            return None
        return (
            f"Same error on '{self.error_run_target}' repeated {self.error_run_count} times: "
            f"{self.error_run_text}"
        )

    def _empty_replies(self) -> str | None:
        if self.empty_replies < self.config.max_empty_replies:
            return None
        return (
            f"The model replied with nothing (no text, no tool call) "
            f"{self.empty_replies} times in a row"
        )

    def _oscillation(self) -> str | None:
        window = self.config.oscillation_window
        writes = self.recent_writes[-window:]
        if len(writes) < window:
            return None
        a, b = writes[0], writes[1]
        if a == b or any(t != (a, b)[i % 2] for i, t in enumerate(writes)):
            return None
        return f"Oscillating between '{a}' and '{b}'"

    def _no_progress(self) -> str | None:
        size = self.config.progress_window
        if len(self.recent_actions) < size:
            return None
        window = [_Mark.parse(a) for a in self.recent_actions[-size:]]
        changed: dict[str, None] = {}
        passing_tests = 0
        kinds: dict[str, int] = {}
        for action in window:
            if action.kind is ActionKind.TEST and action.success:
                passing_tests += 1
                label = "passing test"
            elif action.success and action.changed:
                changed[action.target] = None
                label = _PROGRESS_LABELS[action.kind]
            else:
                label = _LABELS[action.kind, action.success]
            kinds[label] = kinds.get(label, 0) + 1
        progress = len(changed) + passing_tests
        if progress >= self.config.min_progress:
            return None
        parts = ", ".join(_count(kinds[label], label) for label in _LABEL_ORDER if label in kinds)
        if progress == 0:
            return f"No progress in the last {size} actions: {parts}"
        return (
            f"Too little progress in the last {size} actions "
            f"({progress} of {self.config.min_progress} needed): {parts}"
        )


class _Mark(NamedTuple):
    """One action as the windowed rules read it; kept as ``str(mark)``: ``"w+c 1f0e...``:
    kind (r, w, c, t), ``+`` succeeded or ``-`` failed, ``c`` changed something, the target's
    digest, and for a successful command its output's digest."""

    kind: ActionKind
    success: bool
    changed: bool
    target: str
    content: str = ""

    @classmethod
    def of(
        cls, kind: ActionKind, success: bool, changed: bool, target: str, content: str | None
    ) -> _Mark:
        # Only a successful command's output is compared (``record_tool_call``).
        kept = content if kind is ActionKind.COMMAND and success else None
        return cls(kind, success, changed, _hash(target), "" if kept is None else _hash(kept))

    @classmethod
    def parse(cls, text: str) -> _Mark:
        head, _, rest = text.partition(" ")
        target, _, content = rest.partition(" ")
        return cls(_KINDS[head[0]], head[1] == "+", head.endswith("c"), target, content)

    def __str__(self) -> str:
        flags = ("+" if self.success else "-") + ("c" if self.changed else "")
        return " ".join(
            part for part in (_CODES[self.kind] + flags, self.target, self.content) if part
        )


_CODES = {
    ActionKind.READ_ONLY: "r",
    ActionKind.FILE_WRITE: "w",
    ActionKind.COMMAND: "c",
    ActionKind.TEST: "t",
}
_KINDS = {code: kind for kind, code in _CODES.items()}


def _mark(action: ActionRecord) -> str:
    """``action`` as the mark ``recent_actions`` keeps."""
    return str(
        _Mark.of(action.kind, action.success, action.changed, action.target, action.content_hash)
    )


_LABELS = {
    (ActionKind.READ_ONLY, True): "read-only",
    (ActionKind.FILE_WRITE, True): "unchanged write",
    (ActionKind.COMMAND, True): "repeated command",
    (ActionKind.TEST, False): "failed test",
    (ActionKind.READ_ONLY, False): "failed",
    (ActionKind.FILE_WRITE, False): "failed",
    (ActionKind.COMMAND, False): "failed",
}
_PROGRESS_LABELS = {
    ActionKind.FILE_WRITE: "change",
    ActionKind.COMMAND: "command",
    ActionKind.READ_ONLY: "new read",
    ActionKind.TEST: "passing test",
}
_LABEL_ORDER = (
    "read-only",
    "failed",
    "unchanged write",
    "repeated command",
    "failed test",
    "change",
    "command",
    "new read",
    "passing test",
)
_ADJECTIVES = frozenset({"read-only", "failed"})


def _count(n: int, label: str) -> str:
    return f"{n} {label}" if label in _ADJECTIVES or n == 1 else f"{n} {label}s"


_UUID = re.compile(r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)*")
_QUOTES = re.compile("['\"`‘’“”]")
_SPACE = re.compile(r"\s+")


def normalise_error(error: str) -> str:
    """The error with what varies between identical failures (numbers, ids, quotes) removed."""
    text = error.lower()
    text = _UUID.sub("<id>", text)
    text = _HEX.sub("<hex>", text)
    text = _NUMBER.sub("<n>", text)
    text = _QUOTES.sub("", text)
    return _SPACE.sub(" ", text).strip()


def _push(items: list[_T], item: _T, limit: int) -> None:
    items.append(item)
    del items[:-limit]


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _shorten(text: str, limit: int = _SHORT) -> str:
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
