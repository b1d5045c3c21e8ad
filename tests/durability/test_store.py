"""The conversation store: content-addressed blobs written once, conversations as chains of
segments (read whole, or from their end for a view: ``tests/threads/test_thread_view.py``),
what a worker wrote kept for its next call, and clear errors for what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from tests.support.counting import CountingBlobs
from treadle.activities.errors import StoreUnavailable
from treadle.activities.store.blobs import BlobCorrupt, BlobMissing, FileBlobStore, key_of
from treadle.activities.store.conversation import ConversationStore
from treadle.activities.store.tail import view_of
from treadle.activities.store.view import view
from treadle.activities.tools.builtin import ToolActivities, execute_tool
from treadle.activities.tools.confinement import Confinement
from treadle.workflows.agent.messages.models import ChatMessage, ToolCall, ToolPolicy, ToolRequest


def message(role: str, text: str) -> ChatMessage:
    return ChatMessage(role=role, content=text)  # type: ignore[arg-type]


async def test_a_blob_is_stored_once_under_the_hash_of_its_bytes(tmp_path: Path) -> None:
    """The same bytes twice are one file; the key is their SHA-256."""
    store = FileBlobStore(tmp_path)
    first = await store.put(b"hello")
    second = await store.put(b"hello")
    assert first == second == key_of(b"hello")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [tmp_path / first[:2] / first[2:]]
    assert await store.get(first) == b"hello"


async def test_many_blobs_are_stored_in_order_as_one_put_each_would(tmp_path: Path) -> None:
    """``put_many``: the keys ``put`` gives, in order, each stored once; a store that cannot be
    written names the first blob it could not write."""
    store = FileBlobStore(tmp_path / "store")
    keys = await store.put_many([b"one", b"two", b"one"])
    assert keys == [key_of(b"one"), key_of(b"two"), key_of(b"one")]
    assert [await store.get(key) for key in keys] == [b"one", b"two", b"one"]
    assert len([p for p in (tmp_path / "store").rglob("*") if p.is_file()]) == 2
    assert await store.put_many([]) == []
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("a file where the store's directory should be")
    with pytest.raises(StoreUnavailable, match=f"cannot write {key_of(b'one')}"):
        await FileBlobStore(blocked).put_many([b"one", b"two"])


async def test_a_missing_blob_is_an_error_that_names_it(tmp_path: Path) -> None:
    """Never a silent empty message: the key and the store are in the error."""
    store = FileBlobStore(tmp_path)
    key = key_of(b"never written")
    with pytest.raises(BlobMissing, match=f"conversation blob {key} is missing from the store"):
        await store.get(key)


async def test_a_blob_changed_on_disk_is_refused(tmp_path: Path) -> None:
    """Bytes that no longer hash to their key are corrupt, not content."""
    store = FileBlobStore(tmp_path)
    key = await store.put(b"original")
    (tmp_path / key[:2] / key[2:]).write_bytes(b"tampered")
    with pytest.raises(BlobCorrupt, match="does not match its key"):
        await store.get(key)
    with pytest.raises(BlobCorrupt, match="not a conversation blob key"):
        await store.get("../../etc/passwd")


async def test_a_conversation_is_rebuilt_from_its_chain_of_segments(tmp_path: Path) -> None:
    """Three calls' worth of segments come back in order; a fresh worker (no cache) reads the
    same conversation from disk, and stored contents are resolved."""
    blobs = FileBlobStore(tmp_path)
    writer = ConversationStore(blobs)
    big = "x" * 50_000
    ref = await writer.put_text(big)
    head = await writer.extend(None, (message("system", "s"), message("user", "task")))
    head = await writer.extend(head, (message("assistant", "a1"),))
    tool = ChatMessage(role="tool", tool_call_id="c1", content="preview", content_ref=ref)
    head = await writer.extend(head, (tool,))
    reader = ConversationStore(FileBlobStore(tmp_path))
    messages = await reader.messages(head)
    assert [m.content for m in messages] == ["s", "task", "a1", big]
    assert messages[-1].content_ref is None
    assert await writer.messages(head) == messages


async def test_store_bytes_grow_with_the_conversation_not_its_square(tmp_path: Path) -> None:
    """Each call adds one segment of its new messages: 200 calls cost ~200 segments' bytes."""
    store = ConversationStore(FileBlobStore(tmp_path))
    head = None
    sizes = []
    for i in range(200):
        head = await store.extend(head, (message("assistant", f"step {i} " + "y" * 200),))
        sizes.append(sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()))
    # Linear: twice the calls, about twice the bytes (a whole-conversation copy per call
    # would make it four times).
    assert sizes[199] < 2.2 * sizes[99], (sizes[99], sizes[199])
    assert len(await store.messages(head)) == 200


async def test_a_segment_that_is_not_one_is_corrupt(tmp_path: Path) -> None:
    """A key that names some other blob is refused as a conversation head."""
    blobs = FileBlobStore(tmp_path)
    key = await blobs.put(b'{"not": "a segment"}')
    with pytest.raises(BlobCorrupt, match="is not a segment"):
        await ConversationStore(blobs).messages(key)


async def test_a_long_tool_output_travels_as_a_preview_and_a_key(tmp_path: Path) -> None:
    """The tool activity stores a 50 KB output once and returns its head, tail and key."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    body = "first line\n" + "x" * 50_000 + "\nlast line"
    (workspace / "big.txt").write_text(body)
    store = ConversationStore(FileBlobStore(tmp_path / "store"))
    tools = ToolActivities(store=store, confinement=Confinement.OFF)
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "big.txt"}')
    request = ToolRequest(
        call=call, workspace=str(workspace), policy=ToolPolicy(max_output_chars=60_000)
    )
    result = await ActivityEnvironment().run(tools.run_tool, request)
    assert result.output_ref is not None
    assert result.output_chars is not None and result.output_chars > 50_000
    assert len(result.output) < 1_200
    assert "first line" in result.output and "last line" in result.output
    assert (
        await store.get_text(result.output_ref)
        == (await execute_tool(workspace, "read_file", call.arguments, request.policy)).output
    )
    short = ToolCall(id="c2", name="list_dir", arguments="{}")
    small = await ActivityEnvironment().run(
        tools.run_tool, ToolRequest(call=short, workspace=str(workspace))
    )
    assert small.output_ref is None and small.output.startswith("big.txt")


class _Xor:
    """A toy sealer: enough to tell sealed bytes from plain ones."""

    def seal(self, data: bytes) -> bytes:
        return bytes(b ^ 0x5A for b in data)

    def open(self, data: bytes) -> bytes:
        return bytes(b ^ 0x5A for b in data)


async def test_a_blob_this_store_cannot_open_is_written_again(tmp_path: Path) -> None:
    """Same content, another store's format (sealed vs plain): rewritten, then readable."""
    sealed = FileBlobStore(tmp_path, _Xor())
    plain = FileBlobStore(tmp_path)
    key = await sealed.put(b"shared content")
    with pytest.raises(BlobCorrupt):
        await plain.get(key)
    assert await plain.put(b"shared content") == key
    assert await plain.get(key) == b"shared content"


async def test_a_conversation_written_before_segments_had_an_index_is_read_whole_once(
    tmp_path: Path,
) -> None:
    """Segments written without an index (before there were any) are still shown as the view
    of the whole record; the segment written after them has one, so the call after that reads
    back only as far as its view reaches."""
    blobs = FileBlobStore(tmp_path)
    writer = ConversationStore(blobs)
    record = [message("system", "s"), message("user", "task")]
    heads = [await blobs.put(_unindexed(None, tuple(record)))]
    for step in range(80):
        text = f"output {step} " + "o" * 2_000
        stored = ChatMessage(role="tool", tool_call_id="c", content_ref=await writer.put_text(text))
        heads.append(await blobs.put(_unindexed(heads[-1], (message("assistant", "a"), stored))))
        record += [
            message("assistant", "a"),
            ChatMessage(role="tool", tool_call_id="c", content=text),
        ]
    added = (message("user", "and now?"),)
    whole = (*record, *added)
    reader = ConversationStore(blobs)
    assert await view_of(reader, heads[-1], len(record), added, 5_000) == view(whole, 5_000)
    head = await reader.extend(heads[-1], added)

    counted = CountingBlobs(blobs)
    fresh = ConversationStore(counted)
    assert await view_of(fresh, head, len(whole), (), 5_000) == view(whole, 5_000)
    assert heads[0] in counted.reads  # the first segment: the system prompt and the task
    assert not set(heads[1:40]) & set(counted.reads)
    assert await fresh.messages(head) == whole


def _unindexed(parent: str | None, messages: tuple[ChatMessage, ...]) -> bytes:
    """A segment as workers wrote them before segments had an index."""
    body = {
        "parent": parent,
        "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in messages],
    }
    return json.dumps(body, sort_keys=True).encode()


async def test_a_worker_reads_once_what_it_read_and_again_what_it_wrote(tmp_path: Path) -> None:
    """A worker keeps what it read (segments, texts) and reads the conversation's next turn
    only; what it wrote itself it reads back from the store (a store gone away is met there,
    before the model is called)."""
    writer = ConversationStore(FileBlobStore(tmp_path))
    first = await writer.put_text("an output " * 100)
    head = await writer.extend(None, (message("user", "task"),))
    head = await writer.extend(head, (_output("c", first),))
    counted = CountingBlobs(FileBlobStore(tmp_path))
    reader = ConversationStore(counted)
    assert (await reader.messages(head))[1].content == "an output " * 100
    assert len(counted.reads) == 3
    counted.reset()
    assert len(await reader.messages(head)) == 2
    assert counted.reads == []
    second = await writer.put_text("another output " * 100)
    later = await writer.extend(head, (_output("d", second),))
    assert len(await reader.messages(later)) == 3
    assert sorted(counted.reads) == sorted([later, second])
    counted.reset()
    mine = await reader.extend(later, (message("assistant", "done"),))
    assert len(await reader.messages(mine)) == 4
    assert counted.reads == [mine]


def _output(call: str, ref: str) -> ChatMessage:
    return ChatMessage(role="tool", tool_call_id=call, content_ref=ref)
