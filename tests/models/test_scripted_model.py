"""The scripted model server speaks OpenAI chat completions and Anthropic messages from a script."""

from __future__ import annotations

import contextlib
import json
import math
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from treadle.scripted_model import (
    DEMO_SCRIPT,
    KeyEcho,
    Script,
    ScriptedModelServer,
    ScriptError,
    echoed_key,
    load_script,
)

ROOT = Path(__file__).resolve().parents[2]

SCRIPT: dict[str, Any] = {
    "models": {
        "text": [
            {"content": "Hello there.", "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
        ],
        "tools": [
            {
                "content": "Looking.",
                "tool_calls": [
                    {"name": "list_dir", "arguments": {"path": "."}},
                    {"name": "read_file", "arguments": {"path": "a.md"}, "id": "call_custom"},
                ],
            },
            {"tool_calls": [{"name": "write_file", "arguments": '{"path": "x.md", '}]},
            {"content": "All done."},
        ],
        "flaky": [
            {
                "content": "Recovered.",
                "errors": [
                    {"status": 429, "headers": {"Retry-After": "1"}},
                    {"status": 500, "body": "upstream exploded"},
                ],
            }
        ],
        "raw": [{"raw": "{not json", "raw_status": 200}],
        "loop": [{"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}],
        "slow": [{"content": "Eventually.", "delay": 3600}],  # longer than any test waits
        "cached": [
            {
                "content": "From cache.",
                "usage": {"prompt_tokens": 100, "completion_tokens": 5, "cached_tokens": 60},
            }
        ],
        "overloaded": [{"content": "Back.", "errors": [{"status": 529}]}],
        "stringly": [{"tool_calls": [{"name": "write_file", "arguments": '{"path": "x.md"}'}]}],
        "confident": [
            {"content": "Fairly sure of this.", "confidence": 0.8},
            {"tool_calls": [{"name": "list_dir"}], "confidence": 0.5},
        ],
    }
}

ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}


def conversation(task: str = "Do the task", assistant_turns: int = 0) -> list[dict[str, Any]]:
    """Messages with `assistant_turns` assistant/tool exchanges after the user task."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": task},
    ]
    for turn in range(assistant_turns):
        call_id = f"call_t{turn}_0"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "list_dir", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "ok"})
    return messages


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCRIPT) as srv:
        yield srv


@pytest.fixture
def client(server: ScriptedModelServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        yield http


def chat(client: httpx.Client, model: str, **body: Any) -> httpx.Response:
    body.setdefault("messages", conversation())
    return client.post("/chat/completions", json={"model": model, **body})


def test_text_turn_is_a_stop_completion(client: httpx.Client) -> None:
    """A content-only turn answers with an assistant message and finish_reason "stop"."""
    response = chat(client, "text")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    data = response.json()
    assert data["object"] == "chat.completion"
    assert data["id"].startswith("chatcmpl-")
    assert isinstance(data["created"], int)
    assert data["model"] == "text"
    (choice,) = data["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "Hello there."
    assert "tool_calls" not in choice["message"]
    assert data["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_tool_call_turn_sends_native_tool_calls(client: httpx.Client) -> None:
    """A tool-call turn sends OpenAI tool_calls whose arguments string decodes to the object."""
    data = chat(client, "tools").json()
    (choice,) = data["choices"]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "Looking."
    first, second = message["tool_calls"]
    assert first["id"] == "call_t0_0"
    assert first["type"] == "function"
    assert first["function"]["name"] == "list_dir"
    assert isinstance(first["function"]["arguments"], str)
    assert json.loads(first["function"]["arguments"]) == {"path": "."}
    assert second["id"] == "call_custom"
    assert json.loads(second["function"]["arguments"]) == {"path": "a.md"}


def test_estimated_usage_when_script_gives_none(client: httpx.Client) -> None:
    """Without scripted usage the server estimates tokens and always reports total_tokens."""
    usage = chat(client, "tools").json()["usage"]
    assert usage["prompt_tokens"] > 0
    assert usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}


def test_string_arguments_are_sent_verbatim(client: httpx.Client) -> None:
    """Arguments given as a string reach the client unchanged, even when not valid JSON."""
    data = chat(client, "tools", messages=conversation(assistant_turns=1)).json()
    (call,) = data["choices"][0]["message"]["tool_calls"]
    assert call["id"] == "call_t1_0"
    assert call["function"]["arguments"] == '{"path": "x.md", '
    assert data["choices"][0]["message"]["content"] is None


def test_turn_index_is_the_assistant_message_count(client: httpx.Client) -> None:
    """The number of assistant messages picks the turn; past the end the last turn repeats."""
    contents = [
        chat(client, "tools", messages=conversation(assistant_turns=n)).json()["choices"][0][
            "message"
        ]["content"]
        for n in (0, 1, 2, 3, 7)
    ]
    assert contents == ["Looking.", None, "All done.", "All done.", "All done."]


def test_arrival_order_ignores_the_conversation(
    server: ScriptedModelServer, client: httpx.Client
) -> None:
    """A model added in arrival order answers each request with its next turn, even a request
    whose conversation was shortened; a failed attempt does not use a turn up."""
    server.add_model(
        "arrival",
        [
            {"content": "one", "errors": [{"status": 503}]},
            {"content": "two"},
            {"content": "three"},
        ],
        order="arrival",
    )
    replies = [chat(client, "arrival", messages=conversation(assistant_turns=0)) for _ in range(5)]
    assert [r.status_code for r in replies] == [503, 200, 200, 200, 200]
    assert [r.json()["choices"][0]["message"]["content"] for r in replies[1:]] == [
        "one",
        "two",
        "three",
        "three",
    ]


def test_a_script_ending_in_a_tool_call_loops(client: httpx.Client) -> None:
    """A one-turn tool-call script keeps calling tools, with ids unique per turn."""
    for n in range(4):
        choice = chat(client, "loop", messages=conversation(assistant_turns=n)).json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][0]["id"] == f"call_t{n}_0"


def test_errors_come_first_then_the_answer(client: httpx.Client) -> None:
    """Scripted errors answer the first attempts of a turn in order, then the turn succeeds."""
    first = chat(client, "flaky")
    assert first.status_code == 429
    assert first.headers["retry-after"] == "1"
    assert first.json()["error"]["code"] == "rate_limit_exceeded"
    assert set(first.json()["error"]) == {"message", "type", "param", "code"}

    second = chat(client, "flaky")
    assert second.status_code == 500
    assert second.text == "upstream exploded"

    third = chat(client, "flaky")
    assert third.status_code == 200
    assert third.json()["choices"][0]["message"]["content"] == "Recovered."
    assert chat(client, "flaky").status_code == 200


def test_each_conversation_counts_its_own_attempts(client: httpx.Client) -> None:
    """Attempts are counted per conversation (first user message), so another run fails afresh."""
    assert chat(client, "flaky", messages=conversation("task A")).status_code == 429
    assert chat(client, "flaky", messages=conversation("task B")).status_code == 429
    assert chat(client, "flaky", messages=conversation("task A")).status_code == 500
    assert chat(client, "flaky", messages=conversation("task A")).status_code == 200
    assert chat(client, "flaky", messages=conversation("task B")).status_code == 500


def test_raw_body_is_sent_verbatim(client: httpx.Client) -> None:
    """A raw turn sends its text as the body, so clients meet a malformed response."""
    response = chat(client, "raw")
    assert response.status_code == 200
    assert response.text == "{not json"


def test_unknown_model_is_404(client: httpx.Client) -> None:
    """An unscripted model gets OpenAI's model_not_found error."""
    response = chat(client, "gpt-nope")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found"
    assert "`gpt-nope` does not exist" in error["message"]


def test_invalid_json_body_is_400(client: httpx.Client) -> None:
    """A body that is not JSON gets a 400 error object."""
    response = client.post(
        "/chat/completions", content=b"{oops", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_missing_messages_is_400(client: httpx.Client) -> None:
    """A request without messages is rejected like OpenAI does."""
    response = client.post("/chat/completions", json={"model": "text"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages"


def test_unknown_path_is_404(client: httpx.Client) -> None:
    """Paths outside the API get OpenAI's Invalid URL error."""
    response = client.post("/completions", json={})
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Invalid URL (POST /v1/completions)"


def test_models_are_listed(client: httpx.Client) -> None:
    """GET /v1/models lists the scripted models."""
    data = client.get("/models").json()
    assert data["object"] == "list"
    assert {model["id"] for model in data["data"]} == set(SCRIPT["models"])


def test_api_key_is_enforced_when_configured() -> None:
    """With an api_key, a missing or wrong bearer token is 401 and the right one is 200."""
    with (
        ScriptedModelServer(SCRIPT, api_key="sk-test") as server,
        httpx.Client(base_url=server.base_url, timeout=10) as client,
    ):
        missing = chat(client, "text")
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "invalid_api_key"
        wrong = client.post(
            "/chat/completions",
            json={"model": "text", "messages": conversation()},
            headers={"Authorization": "Bearer sk-wrong"},
        )
        assert wrong.status_code == 401
        assert "sk-wrong" not in wrong.text
        assert client.get("/models").status_code == 401
        good = client.post(
            "/chat/completions",
            json={"model": "text", "messages": conversation()},
            headers={"Authorization": "Bearer sk-test"},
        )
        assert good.status_code == 200


def test_an_error_can_echo_the_requests_key_in_every_form() -> None:
    """`echo_key` appends the key the request carried to the error's message (default body,
    a body with a message, a string body), in each protocol; a request without a key gets none."""
    key = "Echo" + "Canary0123456789abcdefXYZ"  # 29 characters, mixed case
    forms: list[KeyEcho] = ["exact", "lower", "upper", "prefix", "split"]
    shown = ", ".join(echoed_key(key, f) for f in forms)
    assert shown == (
        f'{key}, {key.lower()}, {key.upper()}, {key[:20]}, {key[:9]}" "{key[9:18]}\n\t{key[18:]}'
    )
    errors = [
        {"status": 503, "echo_key": forms},
        {"status": 401, "body": {"error": {"message": "Bad key"}}, "echo_key": ["lower"]},
        {"status": 502, "body": "proxy says no", "echo_key": ["upper"]},
    ]
    script = {"models": {"m": [{"content": "ok", "errors": errors}]}}
    with (
        ScriptedModelServer(script) as server,
        httpx.Client(base_url=server.base_url, timeout=10) as client,
    ):
        bearer = {"Authorization": f"Bearer {key}"}
        first = client.post("/chat/completions", json=_chat_body("a"), headers=bearer)
        assert first.status_code == 503
        assert first.json()["error"]["message"] == (
            f"The engine is currently overloaded, please try again later. (key: {shown})"
        )
        second = client.post("/chat/completions", json=_chat_body("a"), headers=bearer)
        assert second.json() == {"error": {"message": f"Bad key (key: {key.lower()})"}}
        third = client.post("/chat/completions", json=_chat_body("a"), headers=bearer)
        assert third.text == f"proxy says no (key: {key.upper()})"

        keyless = client.post("/chat/completions", json=_chat_body("b"))
        assert "(key:" not in keyless.text and keyless.status_code == 503

        anthropic = {**ANTHROPIC_HEADERS, "x-api-key": key}
        echoed = message(client, "m", headers=anthropic)
        assert echoed.json()["error"] == {
            "type": "api_error",
            "message": f"Internal server error (key: {shown})",
        }


def _chat_body(task: str) -> dict[str, Any]:
    return {"model": "m", "messages": conversation(task)}


def test_requests_are_recorded(server: ScriptedModelServer, client: httpx.Client) -> None:
    """Every chat request is recorded in order with its parsed body and lowercase headers."""
    chat(client, "text", messages=conversation("first"))
    chat(client, "tools", messages=conversation("second"), tools=[])
    client.get("/models")
    recorded = server.requests
    assert [r.model for r in recorded] == ["text", "tools"]
    assert recorded[0].body["messages"][1]["content"] == "first"
    assert recorded[1].body["tools"] == []
    assert recorded[0].headers["content-type"] == "application/json"
    assert [r.body["messages"][1]["content"] for r in server.requests_for("tools")] == ["second"]


def test_add_model_validates_and_serves(server: ScriptedModelServer, client: httpx.Client) -> None:
    """add_model adds a scripted model at run time and rejects a bad turn naming its index."""
    server.add_model("late", [{"content": "Hi."}])
    assert chat(client, "late").json()["choices"][0]["message"]["content"] == "Hi."
    with pytest.raises(ScriptError, match=r"model 'late' turn 1"):
        server.add_model("late", [{"content": "ok"}, {"contnet": "typo"}])


def test_stop_interrupts_a_delayed_answer(server: ScriptedModelServer) -> None:
    """Stopping the server does not wait out a turn's delay; the client sees the hang-up."""
    outcome: list[BaseException | httpx.Response] = []

    def call() -> None:
        with httpx.Client(base_url=server.base_url, timeout=120) as http:
            try:
                outcome.append(chat(http, "slow"))
            except httpx.HTTPError as exc:
                outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 60  # a watchdog against a hang, not a measured duration
    while not server.requests_for("slow"):
        assert time.monotonic() < deadline, "the request never reached the server"
        time.sleep(0.01)
    # The turn waits an hour: a stop that waited it out would hang, and the watchdogs below
    # (not measurements) fail it; one that does not returns and the caller hears the hang-up.
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    stopping.join(timeout=60)
    assert not stopping.is_alive(), "stop() is waiting out the turn's delay"
    caller.join(timeout=60)
    assert len(outcome) == 1
    assert isinstance(outcome[0], httpx.RemoteProtocolError), outcome


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"script file not found"),
        ("{nope", r"invalid JSON at line 1 column 2"),
        ('{"models": {"demo": []}}', r"model 'demo': List should have at least 1 item"),
        (
            '{"models": {"demo": [{"content": "a"}, {"tool_calls": [{"arguments": {}}]}]}}',
            r"model 'demo' turn 1 tool_calls\.0\.name: Field required",
        ),
        ('{"models": {"demo": [{"usage": {}}]}}', r"model 'demo' turn 0 usage\.prompt_tokens"),
        ('{"models": {"demo": [{}]}}', r"model 'demo' turn 0: a turn needs content"),
        ('{"modles": {}}', r"models: Field required"),
        (
            '{"models": {"demo": [{"content": "a", "confidence": 0}]}}',
            r"model 'demo' turn 0 confidence: Input should be greater than 0",
        ),
        (
            '{"models": {"demo": [{"raw": "x", "confidence": 0.5}]}}',
            r"model 'demo' turn 0: raw replaces the whole answer",
        ),
        (
            '{"models": {"demo": [{"raw": "x", "cut_after": 1}]}}',
            r"model 'demo' turn 0: raw is sent whole, never streamed",
        ),
        (
            '{"models": {"demo": [{"content": "a", "cut_attempts": 2}]}}',
            r"model 'demo' turn 0: cut_attempts needs cut_after",
        ),
        (
            '{"models": {"demo": [{"content": "a", "chunk_delay": -1}]}}',
            r"model 'demo' turn 0 chunk_delay: Input should be greater than or equal to 0",
        ),
        (
            '{"models": {"demo": [{"content": "a", "chunk_chars": 0}]}}',
            r"model 'demo' turn 0 chunk_chars: Input should be greater than or equal to 1",
        ),
        (
            '{"models": {"demo": [{"content": "a", '
            '"errors": [{"status": 200, "in_stream": true}]}]}}',
            r"model 'demo' turn 0 errors\.0: an in_stream error below status 400 needs a body",
        ),
        (
            '{"models": {"demo": [{"content": "a", "reject_stream": true, "cut_after": 1}]}}',
            r"model 'demo' turn 0: reject_stream refuses every streaming request",
        ),
    ],
)
def test_script_errors_are_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    """A bad script file raises ScriptError with a one-line message naming the problem."""
    path = tmp_path / "script.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ScriptError, match=message) as info:
        load_script(path)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(str(path))


def test_demo_script_is_valid() -> None:
    """The demo script loads and ends with a final answer after list, write, read+search."""
    script = load_script(DEMO_SCRIPT)
    assert isinstance(script, Script)
    turns = script.models["demo"]
    assert [[call.name for call in turn.tool_calls] for turn in turns] == [
        ["list_dir"],
        ["write_file"],
        ["read_file", "search_files"],
        [],
    ]
    assert turns[-1].content


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    """The CLI prints its URL, serves the script and exits 0 on SIGTERM."""
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"models": {"demo": [{"content": "hi"}]}}))
    command = [
        sys.executable,
        "-m",
        "treadle.scripted_model",
        "--script",
        str(path),
        "--port",
        "0",
    ]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            pattern = r"scripted model server listening on (http://127\.0\.0\.1:\d+/v1) "
            match = re.fullmatch(pattern + r"\(models: demo\)\n", line)
            assert match, line
            with httpx.Client(base_url=match.group(1), timeout=10) as client:
                assert client.get("/models").json()["data"][0]["id"] == "demo"
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_cli_rejects_a_bad_script_in_one_line(tmp_path: Path) -> None:
    """The CLI exits 2 with a one-line error when the script is invalid."""
    path = tmp_path / "script.json"
    path.write_text('{"models": {"demo": [{"content": 1}]}}')
    result = subprocess.run(
        [sys.executable, "-m", "treadle.scripted_model", "--script", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "model 'demo' turn 0 content" in result.stderr


# Log-probabilities (OpenAI)


def test_logprobs_carry_the_scripted_confidence(client: httpx.Client) -> None:
    """With logprobs requested, exp of the mean token logprob is the turn's confidence."""
    choice = chat(client, "confident", logprobs=True).json()["choices"][0]
    entries = choice["logprobs"]["content"]
    assert "".join(entry["token"] for entry in entries) == "Fairly sure of this."
    assert all(entry["bytes"] is None and entry["top_logprobs"] == [] for entry in entries)
    mean = sum(entry["logprob"] for entry in entries) / len(entries)
    assert math.exp(mean) == pytest.approx(0.8)


def test_logprobs_cover_a_tool_call_turn(client: httpx.Client) -> None:
    """A tool-call turn without text still gets at least one logprob entry."""
    messages = conversation(assistant_turns=1)
    choice = chat(client, "confident", messages=messages, logprobs=True).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    entries = choice["logprobs"]["content"]
    assert len(entries) >= 1
    mean = sum(entry["logprob"] for entry in entries) / len(entries)
    assert math.exp(mean) == pytest.approx(0.5)


def test_logprobs_are_null_unless_asked_and_scripted(client: httpx.Client) -> None:
    """Logprobs are null when the request does not ask or the turn has no confidence."""
    assert chat(client, "confident").json()["choices"][0]["logprobs"] is None
    assert chat(client, "confident", logprobs=False).json()["choices"][0]["logprobs"] is None
    assert chat(client, "text", logprobs=True).json()["choices"][0]["logprobs"] is None


# Anthropic Messages API


def anthropic_conversation(
    task: str = "Do the task", assistant_turns: int = 0, *, blocks: bool = False
) -> list[dict[str, Any]]:
    """Anthropic messages: the task (a string or text blocks), then tool_use/tool_result pairs."""
    first: str | list[dict[str, Any]] = [{"type": "text", "text": task}] if blocks else task
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    for turn in range(assistant_turns):
        tool_id = f"toolu_t{turn}_0"
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": tool_id, "name": "list_dir", "input": {}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}],
            }
        )
    return messages


def message(
    client: httpx.Client, model: str, headers: dict[str, str] | None = None, **body: Any
) -> httpx.Response:
    body.setdefault("messages", anthropic_conversation())
    body.setdefault("max_tokens", 1024)
    return client.post(
        "/messages",
        json={"model": model, **body},
        headers=ANTHROPIC_HEADERS if headers is None else headers,
    )


def test_anthropic_text_turn_is_an_end_turn_message(client: httpx.Client) -> None:
    """A content-only turn answers with one text block and stop_reason "end_turn"."""
    response = message(client, "text", system="You are an agent.", temperature=0.2)
    assert response.status_code == 200
    data = response.json()
    assert data["id"].startswith("msg_")
    assert data["type"] == "message"
    assert data["role"] == "assistant"
    assert data["model"] == "text"
    assert data["content"] == [{"type": "text", "text": "Hello there."}]
    assert data["stop_reason"] == "end_turn"
    assert data["stop_sequence"] is None
    assert response.headers["request-id"].startswith("req_")


def test_anthropic_tool_use_turn_sends_an_input_object(client: httpx.Client) -> None:
    """A tool-call turn without text is a single tool_use block whose input is an object."""
    data = message(client, "loop").json()
    assert data["stop_reason"] == "tool_use"
    assert data["content"] == [
        {"type": "tool_use", "id": "toolu_t0_0", "name": "list_dir", "input": {"path": "."}}
    ]


def test_anthropic_parallel_tool_use_follows_the_text(client: httpx.Client) -> None:
    """Several tool calls become tool_use blocks in order after the text block."""
    text, first, second = message(client, "tools").json()["content"]
    assert text == {"type": "text", "text": "Looking."}
    assert first == {
        "type": "tool_use",
        "id": "toolu_t0_0",
        "name": "list_dir",
        "input": {"path": "."},
    }
    assert second["id"] == "call_custom"
    assert second["input"] == {"path": "a.md"}


def test_anthropic_string_arguments_must_decode_to_an_object(client: httpx.Client) -> None:
    """String arguments holding a JSON object become input; others make the turn a 500."""
    (call,) = message(client, "stringly").json()["content"]
    assert call["input"] == {"path": "x.md"}
    broken = message(client, "tools", messages=anthropic_conversation(assistant_turns=1))
    assert broken.status_code == 500
    error = broken.json()["error"]
    assert error["type"] == "api_error"
    assert "not representable in the Anthropic protocol" in error["message"]


def test_anthropic_turn_index_is_the_assistant_message_count(client: httpx.Client) -> None:
    """Assistant messages pick the turn, and default tool_use ids are unique per turn."""
    final = message(client, "tools", messages=anthropic_conversation(assistant_turns=2)).json()
    assert final["content"] == [{"type": "text", "text": "All done."}]
    looped = message(client, "loop", messages=anthropic_conversation(assistant_turns=3)).json()
    assert looped["content"][0]["id"] == "toolu_t3_0"


def test_anthropic_usage_reports_cache_reads_apart(client: httpx.Client) -> None:
    """Scripted cached tokens are cache reads, and input_tokens counts only the rest."""
    assert message(client, "cached").json()["usage"] == {
        "input_tokens": 40,
        "output_tokens": 5,
        "cache_read_input_tokens": 60,
        "cache_creation_input_tokens": 0,
    }
    estimated = message(client, "tools").json()["usage"]
    assert estimated["input_tokens"] > 0
    assert estimated["output_tokens"] > 0
    assert estimated["cache_read_input_tokens"] == 0


def test_anthropic_ignores_confidence(client: httpx.Client) -> None:
    """Anthropic has no logprobs, so a turn's confidence adds nothing to the message."""
    data = message(client, "confident", logprobs=True).json()
    assert "logprobs" not in data
    assert data["content"] == [{"type": "text", "text": "Fairly sure of this."}]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": None}, "messages: Field required"),
        ({"messages": [{"role": "system", "content": "hi"}]}, "messages.0.role"),
        ({"system": 3}, "system"),
        ({"temperature": 1.5}, "temperature"),
        ({"tools": [{"name": "list_dir", "description": "List."}]}, "tools.0.input_schema"),
        (
            {"messages": anthropic_conversation(assistant_turns=1)[:2] + anthropic_conversation()},
            "`tool_use` ids were found without `tool_result` blocks",
        ),
        (
            {"messages": anthropic_conversation(assistant_turns=1)[2:]},
            "unexpected `tool_use_id`",
        ),
    ],
)
def test_anthropic_invalid_requests_are_400(
    client: httpx.Client, change: dict[str, Any], expected: str
) -> None:
    """Requests the Messages API rejects get a 400 invalid_request_error naming the field."""
    body: dict[str, Any] = {
        "model": "text",
        "max_tokens": 1024,
        "system": "You are an agent.",
        "messages": anthropic_conversation(),
        **change,
    }
    body = {key: value for key, value in body.items() if value is not None}
    response = client.post("/messages", json=body, headers=ANTHROPIC_HEADERS)
    assert response.status_code == 400
    data = response.json()
    assert data["type"] == "error"
    assert data["error"]["type"] == "invalid_request_error"
    assert expected in data["error"]["message"]


def test_anthropic_version_header_is_required(client: httpx.Client) -> None:
    """A Messages request without anthropic-version is a 400 invalid_request_error."""
    response = message(client, "text", headers={})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "anthropic-version" in error["message"]


def test_anthropic_api_key_is_the_x_api_key_header() -> None:
    """With an api_key, a missing or wrong x-api-key is a 401 and the right one is a 200."""
    with (
        ScriptedModelServer(SCRIPT, api_key="sk-ant-test") as server,
        httpx.Client(base_url=server.base_url, timeout=10) as client,
    ):
        denied = {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
        }
        missing = message(client, "text")
        assert missing.status_code == 401
        assert missing.json() == denied
        wrong = message(client, "text", headers={**ANTHROPIC_HEADERS, "x-api-key": "sk-wrong"})
        assert wrong.status_code == 401
        assert wrong.json() == denied
        bearer = message(
            client, "text", headers={**ANTHROPIC_HEADERS, "Authorization": "Bearer sk-ant-test"}
        )
        assert bearer.status_code == 401
        good = message(client, "text", headers={**ANTHROPIC_HEADERS, "x-api-key": "sk-ant-test"})
        assert good.status_code == 200
        assert good.json()["content"][0]["text"] == "Hello there."


def test_anthropic_errors_come_first_in_anthropic_shape(client: httpx.Client) -> None:
    """Scripted errors keep their headers and bodies; a bodiless one gets Anthropic's shape."""
    first = message(client, "flaky")
    assert first.status_code == 429
    assert first.headers["retry-after"] == "1"
    data = first.json()
    assert data["type"] == "error"
    assert data["error"]["type"] == "rate_limit_error"
    assert set(data["error"]) == {"type", "message"}

    second = message(client, "flaky")
    assert second.status_code == 500
    assert second.text == "upstream exploded"

    third = message(client, "flaky")
    assert third.status_code == 200
    assert third.json()["content"] == [{"type": "text", "text": "Recovered."}]


def test_anthropic_attempts_are_counted_per_conversation(client: httpx.Client) -> None:
    """The first user message's text names the conversation, whether a string or text blocks."""
    task_a_blocks = anthropic_conversation("task A", blocks=True)
    assert message(client, "flaky", messages=task_a_blocks).status_code == 429
    assert message(client, "flaky", messages=anthropic_conversation("task B")).status_code == 429
    assert message(client, "flaky", messages=task_a_blocks).status_code == 500
    assert message(client, "flaky", messages=anthropic_conversation("task A")).status_code == 200
    assert message(client, "flaky", messages=anthropic_conversation("task B")).status_code == 500
    assert chat(client, "flaky", messages=conversation("task A")).status_code == 429


def test_anthropic_overloaded_error_has_the_default_shape(client: httpx.Client) -> None:
    """A scripted 529 without a body answers Anthropic's overloaded_error."""
    response = message(client, "overloaded")
    assert response.status_code == 529
    assert response.json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert message(client, "overloaded").status_code == 200


def test_anthropic_unknown_model_is_404(client: httpx.Client) -> None:
    """An unscripted model gets Anthropic's not_found_error naming it."""
    response = message(client, "claude-nope")
    assert response.status_code == 404
    assert response.json() == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "model: claude-nope"},
    }


def test_anthropic_models_are_listed(client: httpx.Client) -> None:
    """GET /v1/models with anthropic-version lists the scripted models in Anthropic's shape."""
    data = client.get("/models", headers=ANTHROPIC_HEADERS).json()
    assert data["has_more"] is False
    assert {model["type"] for model in data["data"]} == {"model"}
    assert [model["id"] for model in data["data"]] == sorted(SCRIPT["models"])


def test_requests_record_their_protocol(server: ScriptedModelServer, client: httpx.Client) -> None:
    """Both protocols are recorded, each with its protocol, and requests_for covers both."""
    chat(client, "text")
    message(client, "text", system="Be brief.")
    openai, anthropic = server.requests_for("text")
    assert openai.protocol == "openai"
    assert anthropic.protocol == "anthropic"
    assert anthropic.body["system"] == "Be brief."
    assert anthropic.headers["anthropic-version"] == "2023-06-01"


# Streaming (both protocols)


STREAMING: dict[str, Any] = {
    "models": {
        "words": [
            {
                "content": "Hello there, streaming world.",
                "usage": {"prompt_tokens": 10, "completion_tokens": 4, "cached_tokens": 6},
            }
        ],
        "calls": [
            {
                "content": "Two at once.",
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": "a.md"}},
                    {"name": "list_dir", "arguments": {"path": "src"}, "id": "call_mine"},
                ],
                "chunk_chars": 4,
            }
        ],
        "paced": [{"content": "one two three four", "chunk_delay": 3600}],  # an hour apart
        "cut": [{"content": "one two three four", "cut_after": 2, "cut_attempts": 2}],
        "fails": [{"content": "one two", "errors": [{"status": 529, "in_stream": True}]}],
        "garbled": [
            {"content": "one two", "errors": [{"status": 200, "body": "{oops", "in_stream": True}]}
        ],
        "empty": [{"content": ""}],
    }
}


def sse(text: str) -> list[tuple[str | None, str]]:
    """A text/event-stream body as (event name, data) pairs."""
    events = []
    for frame in text.split("\n\n"):
        if not frame.strip():
            continue
        name, data = None, []
        for line in frame.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        events.append((name, "\n".join(data)))
    return events


@pytest.fixture
def streaming() -> Iterator[httpx.Client]:
    with (
        ScriptedModelServer(STREAMING) as server,
        httpx.Client(base_url=server.base_url, timeout=10) as http,
    ):
        yield http


def chunks(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON chunks of an OpenAI stream, checking it ends with [DONE]."""
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["transfer-encoding"] == "chunked"
    events = sse(response.text)
    assert events[-1] == (None, "[DONE]")
    return [json.loads(data) for _, data in events[:-1]]


def test_openai_stream_sends_text_in_chunks_and_usage_last(streaming: httpx.Client) -> None:
    """A streamed text turn: a role delta, the text a word per chunk, a finish_reason chunk, a
    usage chunk without choices (include_usage), then [DONE]; every chunk names the completion."""
    response = chat(streaming, "words", stream=True, stream_options={"include_usage": True})
    received = chunks(response)
    assert {c["object"] for c in received} == {"chat.completion.chunk"}
    assert len({c["id"] for c in received}) == 1
    assert {c["model"] for c in received} == {"words"}
    first, *texts, finish, usage = received
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [c["choices"][0]["delta"]["content"] for c in texts]
    assert pieces == ["Hello", " there,", " streaming", " world."]
    assert finish["choices"][0]["delta"] == {}
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert all(c["usage"] is None for c in received[:-1])
    assert usage["choices"] == []
    assert usage["usage"]["prompt_tokens_details"] == {"cached_tokens": 6}
    assert usage["usage"]["total_tokens"] == 14


def test_openai_stream_without_include_usage_has_no_usage(streaming: httpx.Client) -> None:
    """Without stream_options.include_usage no chunk carries usage, as OpenAI does."""
    received = chunks(chat(streaming, "words", stream=True))
    assert all("usage" not in c for c in received)
    assert received[-1]["choices"][0]["finish_reason"] == "stop"


def test_stream_options_without_stream_is_400(streaming: httpx.Client) -> None:
    """stream_options on a request that does not stream is refused, as OpenAI refuses it."""
    response = chat(streaming, "words", stream_options={"include_usage": True})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream_options"


def test_openai_stream_sends_tool_calls_by_index_then_argument_fragments(
    streaming: httpx.Client,
) -> None:
    """Each tool call: a delta with its index, id, name and empty arguments, then its arguments
    in chunk_chars fragments; the finish reason is tool_calls."""
    received = chunks(chat(streaming, "calls", stream=True))
    deltas = [c["choices"][0]["delta"] for c in received]
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == "Two at once."
    assert [d["content"] for d in deltas if d.get("content")] == ["Two ", "at o", "nce."]
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    heads = [call for call in calls if "id" in call]
    assert heads == [
        {
            "index": 0,
            "id": "call_t0_0",
            "type": "function",
            "function": {"name": "read_file", "arguments": ""},
        },
        {
            "index": 1,
            "id": "call_mine",
            "type": "function",
            "function": {"name": "list_dir", "arguments": ""},
        },
    ]
    for index, arguments in enumerate([{"path": "a.md"}, {"path": "src"}]):
        fragments = [c["function"]["arguments"] for c in calls if c["index"] == index]
        assert all(len(f) <= 4 for f in fragments)
        assert json.loads("".join(fragments)) == arguments
    assert received[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_stream_spreads_logprobs_over_the_text(client: httpx.Client) -> None:
    """Streamed with logprobs, the chunks' entries together are the non-streaming ones."""
    whole = chat(client, "confident", logprobs=True).json()["choices"][0]["logprobs"]["content"]
    received = chunks(chat(client, "confident", logprobs=True, stream=True))
    streamed = [
        entry
        for c in received
        for entry in ((c["choices"][0].get("logprobs") or {}).get("content") or [])
    ]
    assert streamed == whole


def test_anthropic_stream_sends_the_message_as_events(streaming: httpx.Client) -> None:
    """message_start (no content, input usage), ping, a text block and a tool_use block with
    their deltas, message_delta with the stop reason and output tokens, message_stop."""
    response = message(streaming, "calls", stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    events = sse(response.text)
    for name, data in events:
        assert json.loads(data)["type"] == name  # the event name repeats the data's type
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    data = [json.loads(d) for _, d in events]
    start = data[0]["message"]
    assert (start["content"], start["stop_reason"], start["model"]) == ([], None, "calls")
    blocks: dict[int, dict[str, Any]] = {}
    for item in data:
        if item["type"] == "content_block_start":
            blocks[item["index"]] = dict(item["content_block"], parts=[])
        elif item["type"] == "content_block_delta":
            delta = item["delta"]
            blocks[item["index"]]["parts"].append(delta.get("text", delta.get("partial_json")))
    assert blocks[0]["type"] == "text"
    assert "".join(blocks[0]["parts"]) == "Two at once."
    assert [b["name"] for b in blocks.values() if b["type"] == "tool_use"] == [
        "read_file",
        "list_dir",
    ]
    assert blocks[2]["id"] == "call_mine"
    assert json.loads("".join(blocks[1]["parts"])) == {"path": "a.md"}
    assert data[-2]["delta"]["stop_reason"] == "tool_use"
    assert data[-2]["usage"]["output_tokens"] > 0


def test_a_stream_assembles_into_the_whole_answer(streaming: httpx.Client) -> None:
    """Anthropic's streamed usage, blocks and stop reason are the non-streaming message's."""
    whole = message(streaming, "words").json()
    data = [json.loads(d) for _, d in sse(message(streaming, "words", stream=True).text)]
    usage = data[0]["message"]["usage"] | data[-2]["usage"]
    assert usage == whole["usage"]
    assert usage["cache_read_input_tokens"] == 6
    text = "".join(d["delta"]["text"] for d in data if d["type"] == "content_block_delta")
    assert [{"type": "text", "text": text}] == whole["content"]
    assert data[-2]["delta"]["stop_reason"] == whole["stop_reason"]


def test_a_turn_without_text_streams_no_text_block(streaming: httpx.Client) -> None:
    """Empty content: OpenAI's role delta says "" and no content chunk follows; Anthropic sends
    no text block, as its non-streaming message has none."""
    received = chunks(chat(streaming, "empty", stream=True))
    assert [c["choices"][0]["delta"] for c in received] == [
        {"role": "assistant", "content": ""},
        {},
    ]
    names = [name for name, _ in sse(message(streaming, "empty", stream=True).text)]
    assert "content_block_start" not in names


def read_events(http: httpx.Client, path: str, **body: Any) -> tuple[list[str], Exception | None]:
    """The data lines of a stream as they arrive, and the error that ended it, if any."""
    lines: list[str] = []
    headers = ANTHROPIC_HEADERS if path == "/messages" else {}
    body.setdefault("messages", anthropic_conversation() if headers else conversation())
    body.setdefault("max_tokens", 100)
    try:
        with http.stream("POST", path, json={"stream": True, **body}, headers=headers) as response:
            lines.extend(line for line in response.iter_lines() if line.startswith("data: "))
    except httpx.HTTPError as exc:
        return lines, exc
    return lines, None


@pytest.mark.parametrize("path", ["/chat/completions", "/messages"])
def test_cut_after_hangs_up_mid_stream_then_a_retry_gets_it_whole(
    streaming: httpx.Client, path: str
) -> None:
    """cut_after 2: the first cut_attempts (2) attempts end after two content chunks with an
    incomplete chunked body; the next attempt gets the whole stream."""
    text = "data: [DONE]" if path == "/chat/completions" else 'data: {"type": "message_stop"}'
    for _ in range(2):
        lines, error = read_events(streaming, path, model="cut")
        assert isinstance(error, httpx.RemoteProtocolError)
        assert sum('"one' in line or '" two' in line for line in lines) == 2
        assert not any('" three' in line for line in lines)
    lines, error = read_events(streaming, path, model="cut")
    assert error is None
    assert lines[-1] == text
    assert any('" four' in line for line in lines)


def test_a_cut_without_enough_content_stops_before_the_last_event() -> None:
    """With fewer content chunks than cut_after, the stream stops just before [DONE]."""
    with (
        ScriptedModelServer({"models": {"m": [{"content": "hi", "cut_after": 10}]}}) as server,
        httpx.Client(base_url=server.base_url, timeout=10) as http,
    ):
        lines, error = read_events(http, "/chat/completions", model="m")
        assert isinstance(error, httpx.RemoteProtocolError)
        assert lines[-1] != "data: [DONE]"
        assert json.loads(lines[-1].removeprefix("data: "))["choices"][0]["finish_reason"] == (
            "stop"
        )
        assert chat(http, "m").status_code == 200  # not streaming: answered whole


def test_an_in_stream_error_comes_after_the_first_chunk(streaming: httpx.Client) -> None:
    """An in_stream error answers 200, sends the first content chunk, then the protocol's error
    event and ends the stream; the next attempt succeeds; a non-streaming request would have got
    the status."""
    response = chat(streaming, "fails", stream=True)
    assert response.status_code == 200
    events = sse(response.text)
    assert json.loads(events[1][1])["choices"][0]["delta"] == {"content": "one"}
    assert json.loads(events[-1][1]) == {
        "error": {
            "message": "The server had an error.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    assert chunks(chat(streaming, "fails", stream=True))[-1]["choices"][0]["finish_reason"]

    response = message(streaming, "fails", stream=True)
    assert response.status_code == 200
    name, data = sse(response.text)[-1]
    assert name == "error"
    assert json.loads(data) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert message(streaming, "fails").status_code == 200
    assert message(streaming, "fails", messages=anthropic_conversation("other")).status_code == 529


def test_an_in_stream_error_body_is_sent_verbatim(streaming: httpx.Client) -> None:
    """An in_stream error's string body is the event's data as it is: a malformed event."""
    assert sse(chat(streaming, "garbled", stream=True).text)[-1] == (None, "{oops")


def test_chunk_delay_paces_the_stream_and_each_chunk_is_readable_at_once() -> None:
    """With chunk_delay, each event goes out once its delay has passed and is read as it comes:
    the first is read while the next is an hour away, and a server stopped then has sent
    nothing more (the stream is cut short, with no [DONE])."""
    body = {"model": "paced", "messages": conversation(), "stream": True}
    read: list[str] = []
    with (
        ScriptedModelServer(STREAMING) as server,
        httpx.Client(base_url=server.base_url, timeout=60) as http,
        http.stream("POST", "/chat/completions", json=body) as response,
    ):
        lines = (line for line in response.iter_lines() if line.startswith("data: "))
        read.append(next(lines))  # the client's read timeout is the watchdog of a held event
        server.stop()
        with contextlib.suppress(httpx.HTTPError):  # the hang-up mid-stream
            read.extend(lines)
    assert len(read) == 1, read  # of role, four words, finish and [DONE]: the role alone
    assert json.loads(read[0].removeprefix("data: "))["choices"][0]["delta"]["role"] == "assistant"


# Servers that cannot stream

OPENAI_REFUSAL = {
    "error": {
        "message": "Unrecognized request argument supplied: stream_options",
        "type": "invalid_request_error",
        "param": "stream_options",
        "code": None,
    }
}


def test_a_server_without_streaming_refuses_streaming_requests_with_a_400() -> None:
    """streaming=False: a streaming request gets the 400 of an unknown argument (OpenAI names
    stream_options when it is sent, else stream; Anthropic says stream is an extra input); the
    same request without stream is answered; every request is recorded."""
    with (
        ScriptedModelServer(STREAMING, streaming=False) as server,
        httpx.Client(base_url=server.base_url, timeout=10) as http,
    ):
        refused = chat(http, "words", stream=True, stream_options={"include_usage": True})
        assert refused.status_code == 400
        assert refused.json() == OPENAI_REFUSAL
        assert chat(http, "words", stream=True).json()["error"]["param"] == "stream"
        assert chat(http, "words").json()["choices"][0]["message"]["content"] == (
            "Hello there, streaming world."
        )
        refused = message(http, "words", stream=True)
        assert refused.status_code == 400
        assert refused.json() == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "stream: Extra inputs are not permitted",
            },
        }
        assert message(http, "words").status_code == 200
        assert [r.body.get("stream") for r in server.requests_for("words")] == [
            True,
            True,
            None,
            True,
            None,
        ]


@pytest.mark.parametrize("path", ["/chat/completions", "/messages"])
def test_a_turn_that_rejects_streaming_counts_no_attempt_for_the_refusal(path: str) -> None:
    """reject_stream: the streaming request is refused before the turn is played, so the first
    request without stream still gets the turn's first scripted error, and the next the turn;
    another model on the same server streams."""
    script = {
        "models": {
            "plain": [{"content": "Whole.", "reject_stream": True, "errors": [{"status": 500}]}],
            "streams": [{"content": "Streamed."}],
        }
    }
    with (
        ScriptedModelServer(script) as server,
        httpx.Client(base_url=server.base_url, timeout=10) as http,
    ):
        send = chat if path == "/chat/completions" else message
        assert send(http, "plain", stream=True).status_code == 400
        assert send(http, "plain").status_code == 500
        assert send(http, "plain", stream=True).status_code == 400
        assert send(http, "plain").status_code == 200
        streamed = send(http, "streams", stream=True)
        assert streamed.status_code == 200
        assert streamed.headers["content-type"] == "text/event-stream; charset=utf-8"


def test_a_server_for_thousands_of_calls_keeps_only_the_newest_requests() -> None:
    """``keep_requests`` bounds what the server holds (a long benchmark's process would
    otherwise keep every conversation it was sent); the newest are kept, in arrival order."""
    with (
        ScriptedModelServer(SCRIPT, keep_requests=2) as bounded,
        httpx.Client(base_url=bounded.base_url) as http,
    ):
        for n in range(3):
            messages = [{"role": "user", "content": f"request {n}"}]
            http.post("/chat/completions", json={"model": "text", "messages": messages})
        kept = [r.body["messages"][0]["content"] for r in bounded.requests]
    assert kept == ["request 1", "request 2"]
