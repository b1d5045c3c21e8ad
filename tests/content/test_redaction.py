"""The door's parts on their own: which secrets a worker knows, what is redacted from text and
what is left alone, a result walked to its last string, a failure rebuilt without its secrets,
the store's text blobs (a long one redacted off the event loop, searched in pieces) and the
streamed batches."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.exceptions import ApplicationError, CancelledError

from treadle.activities.content import (
    REDACTED,
    RedactedBlobs,
    Redactor,
    door,
    redacted,
    redaction,
    worker_secrets,
)
from treadle.activities.content import logs as content_logs
from treadle.activities.content.interceptor import redacted_error
from treadle.activities.content.redaction import current, redact_error, secret_values, using
from treadle.activities.model.tokens import TokenBatcher
from treadle.activities.store.blobs import FileBlobStore, key_of
from treadle.activities.store.conversation import ConversationStore
from treadle.workflows.agent.messages.models import ChatMessage, RunStatus, ToolResult

KEY = "QmZtRwXyPkJnHgVs" + "TqLrMwNzKxYpGhJk"  # split so no scanner takes it for a real one


def test_a_worker_knows_its_keys_its_secret_named_variables_and_its_mcp_variables() -> None:
    """Secret-named variables of 8 characters or more count, file paths do not; the variables an
    MCP config passes count whatever their names; configured keys always do."""
    environ = {
        "DEPLOY_TOKEN": "tok-value-123456",
        "DB_PASSWORD": "short",
        "GOOGLE_APPLICATION_CREDENTIALS": "/home/me/creds.json",
        "HOME": "/home/me",
        "SEARCH_AUTH": "Bearer abcdefgh12345",
    }
    assert secret_values(environ) == ("tok-value-123456",)
    known = worker_secrets([KEY, None], environ, ["SEARCH_AUTH", "UNSET"])
    assert set(known) == {KEY, "tok-value-123456", "Bearer abcdefgh12345"}


@pytest.mark.parametrize(
    "shaped",
    [
        "sk-" + "proj-abcdefghijklmnop1234",
        "sk-" + "ant-api03-abcdefghijklmnop",
        "AKIA" + "ABCDEFGHIJKLMNOP",
        "ghp_" + "a" * 36,
    ],
)
def test_key_shaped_text_is_redacted_unconfigured(shaped: str) -> None:
    assert Redactor()(f"found {shaped} here") == f"found {REDACTED} here"


def test_ordinary_words_in_content_are_left_alone_but_not_in_errors() -> None:
    """``key-value-store`` is a word in a file; in an error it may be a masked key."""
    text = "a key-value-store with token-based auth, task-runner and desk-top"
    assert Redactor([KEY])(text) == text
    assert redact_error("bad key-abcdef123 given", Redactor()) == f"bad {REDACTED} given"


def test_a_result_without_a_secret_is_the_same_object() -> None:
    result = ToolResult(success=True, output="nothing here", content_hashes={"a.md": "abc"})
    assert redacted(result, Redactor([KEY])) is result


def test_a_result_is_walked_to_its_last_string_keeping_its_type() -> None:
    """Nested models, tuples and dict keys and values are redacted; store keys (SHA-256),
    enums and numbers are left as they are; what holds no secret stays the same object."""
    digest = key_of(b"x")
    message = ChatMessage(role="tool", content=f"got {KEY.lower()}", tool_call_id="c1")
    clean = ChatMessage(role="user", content="hi")
    value: dict[str, Any] = {
        "messages": (message, clean),
        f"path-{KEY}": digest,
        "status": RunStatus.DONE,
        "count": 3,
    }
    out = redacted(value, Redactor([KEY]))
    first, second = out["messages"]
    assert isinstance(first, ChatMessage) and first.content == f"got {REDACTED}"
    assert first.tool_call_id == "c1" and second is clean
    assert out[f"path-{REDACTED}"] == digest
    assert out["status"] is RunStatus.DONE and out["count"] == 3


def test_a_failure_with_a_secret_is_rebuilt_as_the_sdk_would_report_it() -> None:
    """Message, details and the exception it was raised from are redacted; type name,
    retryability and retry delay are kept; the cause chain stays a chain."""
    redactor = Redactor([KEY])
    try:
        try:
            raise KeyError(f"inner {KEY}")
        except KeyError as inner:
            raise ApplicationError(
                f"outer {KEY}",
                {"why": KEY},
                type="Busy",
                non_retryable=True,
                next_retry_delay=timedelta(seconds=3),
            ) from inner
    except ApplicationError as exc:
        safe = redacted_error(exc, redactor)
    assert isinstance(safe, ApplicationError)
    assert safe.message == f"outer {REDACTED}" and safe.details == ({"why": REDACTED},)
    assert (safe.type, safe.non_retryable) == ("Busy", True)
    assert safe.next_retry_delay == timedelta(seconds=3)
    cause = safe.__cause__
    assert isinstance(cause, ApplicationError) and cause.type == "KeyError"
    assert KEY not in cause.message and REDACTED in cause.message
    assert safe.__traceback__ is not None  # where it was raised is kept


def test_a_failure_without_a_secret_and_temporals_own_pass_untouched() -> None:
    redactor = Redactor([KEY])
    plain = ValueError("no secret here")
    assert redacted_error(plain, redactor) is plain
    cancelled = CancelledError(f"cancelled {KEY}")
    assert redacted_error(cancelled, redactor) is cancelled
    other = RuntimeError(f"has {KEY}")
    safe = redacted_error(other, redactor)
    assert isinstance(safe, ApplicationError) and safe.type == "RuntimeError"
    assert not safe.non_retryable and safe.message == f"has {REDACTED}"


async def test_text_blobs_are_stored_redacted_and_binary_ones_as_they_are(tmp_path: Path) -> None:
    """The key names the redacted bytes; a JSON blob stays JSON; bytes that are not text are
    stored untouched."""
    store = RedactedBlobs(FileBlobStore(tmp_path), Redactor([KEY]))
    key = await store.put(f"cat says {KEY}".encode())
    assert (await store.get(key)).decode() == f"cat says {REDACTED}"
    assert key == key_of(f"cat says {REDACTED}".encode())
    segment = json.dumps({"messages": [{"content": f'a "{KEY[:10]}" "{KEY[10:]}"'}]})
    stored = json.loads(await store.get(await store.put(segment.encode())))
    assert KEY[:10] not in json.dumps(stored) and REDACTED in json.dumps(stored)
    binary = b"\xff\x00" + KEY.encode()
    assert await store.get(await store.put(binary)) == binary
    many = await store.put_many([f"one {KEY}".encode(), binary])
    assert [await store.get(key) for key in many] == [f"one {REDACTED}".encode(), binary]


def test_streamed_batches_are_redacted_and_offsets_count_what_is_published() -> None:
    batcher = TokenBatcher(step=1, attempt=1, started=0.0, redact=Redactor([KEY]))
    batcher.add(f"one {KEY} two", 0.0)
    first = batcher.take(1.0)
    assert first is not None and first.text == f"one {REDACTED} two" and first.offset == 0
    batcher.add(" three", 1.0)
    second = batcher.take(10.0)
    assert second is not None and second.offset == len(first.text)


async def test_the_current_redactor_is_the_workers_inside_an_activity_only() -> None:
    """Outside an activity the door removes key shapes only; ``using`` makes a worker's the
    current one for the block and the tasks it starts."""
    assert current()(KEY) == KEY
    with using(Redactor([KEY])):
        assert await asyncio.create_task(_redact_in_task(KEY)) == REDACTED
    assert current()(KEY) == KEY


async def _redact_in_task(text: str) -> str:
    return current()(text)


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_an_activitys_log_lines_are_redacted_with_the_running_workers_secrets() -> None:
    """Message, arguments, string extras and the traceback of a line on the activity logger
    lose the secret; a line without one is left as it was."""
    logger = logging.getLogger(f"door-test-{KEY[:4]}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    seen = Kept()
    logger.addHandler(seen)
    content_logs.install(logger)
    content_logs.install(logger)  # once is enough
    assert len(logger.filters) == 1
    with using(Redactor([KEY])):
        logger.warning("mcp.call_failed reason=%s", f"server said {KEY}", extra={"error": KEY})
        try:
            raise RuntimeError(f"boom {KEY.lower()}")
        except RuntimeError:
            logger.exception("listing failed")
        logger.info("plain %s", "words")
    failed, listing, plain = seen.records
    assert failed.getMessage() == f"mcp.call_failed reason=server said {REDACTED}"
    assert failed.error == REDACTED  # type: ignore[attr-defined]
    assert listing.exc_info is None and listing.exc_text is not None
    assert "RuntimeError: boom [redacted]" in listing.exc_text
    assert KEY.lower() not in logging.Formatter().format(listing)
    assert plain.args == ("words",)


def test_every_line_the_worker_logs_is_redacted_whichever_logger_wrote_it() -> None:
    """Outside any activity (an MCP session's own lines, a library's), the worker's handler
    filter redacts its secrets from each line, and leaves other lines as they were."""
    secret = "Zq8vN2kLp4Rt7wXy"
    root = logging.getLogger()
    handler = logging.Handler()
    seen: list[str] = []
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    root.addHandler(handler)
    try:
        content_logs.redact_every_line(Redactor([secret]))
        content_logs.redact_every_line(Redactor([secret]))  # once per handler, however often
        assert sum(isinstance(f, content_logs.RedactingLogFilter) for f in handler.filters) == 1
        logging.getLogger("mcp.client.stdio").warning("server said %s", secret.lower())
        logging.getLogger("some.library").warning("nothing to hide")
    finally:
        root.removeHandler(handler)
    assert seen == [f"server said {REDACTED}", "nothing to hide"]


class _Watching(Redactor):
    """A worker's redactor that notes the thread each text is redacted on."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__(secrets)
        self.threads: list[int] = []

    def __call__(self, text: str) -> str:
        self.threads.append(threading.get_ident())
        return super().__call__(text)


async def test_a_long_output_is_redacted_off_the_event_loop(tmp_path: Path) -> None:
    """Redacting a megabyte holds the CPU for a long while: the door and the store do it in a
    thread, so the event loop every activity's heartbeats share goes on meanwhile; a short
    output is redacted where it is."""
    redactor = _Watching([KEY])
    store = ConversationStore(RedactedBlobs(FileBlobStore(tmp_path), redactor))
    loop = threading.get_ident()
    long = "x" * 1_000_000 + KEY
    with using(redactor):
        result = await door.tool_output(store, ToolResult(success=True, output=long))
    assert result.output_ref is not None
    assert await store.get_text(result.output_ref) == "x" * 1_000_000 + REDACTED
    assert len(redactor.threads) == 2 and loop not in redactor.threads  # the door's, the store's
    redactor.threads.clear()
    with using(redactor):
        await door.tool_output(store, ToolResult(success=True, output="y" * 1_000 + KEY))
    assert redactor.threads == [loop, loop]


_SHAPED = st.sampled_from(
    [
        "sk-" + "a1B2c3D4e5F6g7H8",
        "sk-proj-" + "Zz09_-" * 4,
        "AKIA" + "ABCDEFGHIJ234567",
        "ghp_" + "x" * 32,
        "xoxb-" + "1234-abcd-5678",
        "AIza" + "Q" * 35,
        KEY[:12],
        KEY,
    ]
)
_FILLER = st.text(alphabet="ab -_\n\t\"'é.\x00", max_size=12)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(_SHAPED, _FILLER), max_size=40), piece=st.integers(1, 40))
def test_a_long_text_is_redacted_in_pieces_as_it_is_whole(parts: list[str], piece: int) -> None:
    """Searched in pieces (so no single search holds the event loop long), a text loses
    exactly what it loses searched whole, wherever the pieces are cut."""
    text = "".join(parts)
    redactor = Redactor([KEY, "a-short-secret"])
    whole, found = redactor(text), redactor.finds(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redaction, "PIECE_CHARS", piece)
        assert redactor(text) == whole
        assert redactor.finds(text) == found
