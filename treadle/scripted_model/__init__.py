"""A scripted model server: a real local HTTP server speaking OpenAI and Anthropic protocols.

The agent's model activity talks to it over HTTP exactly as it talks to OpenAI
(``POST /v1/chat/completions``) or Anthropic (``POST /v1/messages``), so the demo and the test suite
exercise the real client, timeouts, retries and error translation. Answers come from a script
instead of a model, and one script serves both protocols::

    {"models": {"demo": [
        {"content": "I'll look first.",
         "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": "Done."}
    ]}}

Which turn answers a request is decided by the request alone: the number of assistant messages in
``messages``. Retries and concurrent conversations therefore get the same answer; past the end of a
script the last turn repeats. A model added with ``add_model(..., order="arrival")`` instead takes
its turns in the order requests arrive (each answered request the next turn), for runs whose
conversation is compacted on the way and so cannot count its own turns. A turn may fail its first
attempts (``errors``), answer late (``delay``), or send a raw body (``raw``) to simulate a broken
provider; a failing attempt may echo the request's API key back (``echo_key``), as a
misconfigured proxy does, so tests can check it is redacted. A turn's ``confidence`` becomes
OpenAI log-probabilities when the request asks for them (Anthropic has none).

A request with ``"stream": true`` is answered with server-sent events, in the protocol's own
shape (``openai_chat.py``, ``anthropic_messages.py``), over ``Transfer-Encoding: chunked``. The
streamed reply assembles into exactly the non-streaming one. A turn's ``chunk_delay`` paces the
chunks, ``chunk_chars`` sizes them (one word each by default), and ``cut_after`` hangs up
mid-stream on the attempts after its ``errors`` (``cut_attempts`` of them): a stream cut short,
which the next attempt survives. A scripted error marked ``in_stream`` comes as an error event
inside a 200 stream (after the first content chunk) instead of an error status.

A server that cannot stream is simulated too: with ``ScriptedModelServer(..., streaming=False)``
(``--no-streaming`` on the command line) every streaming request, and with a turn's
``reject_stream`` the streaming requests that turn answers, get the 400 a real server sends for
an argument it does not know. OpenAI's names the first one: ``stream_options`` when the request
has it, else ``stream``::

    {"error": {"message": "Unrecognized request argument supplied: stream_options",
               "type": "invalid_request_error", "param": "stream_options", "code": null}}

Anthropic's is ``{"type": "error", "error": {"type": "invalid_request_error", "message":
"stream: Extra inputs are not permitted"}}``. The same request without ``stream`` is answered as
usual; the refusal is no attempt of the turn (its ``errors`` and ``cut_after`` count the
requests it answers), and the refused request is recorded like any other.

Run it on its own with ``python -m treadle.scripted_model --script treadle/demo_script.json``.

The modules, one concept each:

- ``script``: the script format (`Script`, `Turn`, ...) and reading it (`load_script`).
- ``server``: `ScriptedModelServer`: the script, the recorded requests, which turn and attempt
  answers a request.
- ``conversation``: what a request's messages say (turn count, conversation, a rejection).
- ``checks``: what each protocol rejects in a request, as its 400.
- ``auth``: the API key a request carries, and the 401 without the right one.
- ``openai_chat`` / ``anthropic_messages``: a turn as each protocol's reply, stream and errors.
- ``faults``: scripted errors (with key echoes) and streams cut short.
- ``replies``: what both protocols' answers are made of (reply, stream, SSE event).
- ``http_server``: the stdlib HTTP server writing those answers byte for byte.
- ``cli``: the command line.
"""

from treadle.scripted_model.cli import main
from treadle.scripted_model.faults import echoed_key
from treadle.scripted_model.script import (
    DEMO_SCRIPT,
    ECHO_PREFIX,
    KeyEcho,
    Script,
    ScriptError,
    Turn,
    TurnError,
    TurnToolCall,
    TurnUsage,
    load_script,
    parse_script,
)
from treadle.scripted_model.server import RecordedRequest, ScriptedModelServer

__all__ = [
    "DEMO_SCRIPT",
    "ECHO_PREFIX",
    "KeyEcho",
    "RecordedRequest",
    "Script",
    "ScriptError",
    "ScriptedModelServer",
    "Turn",
    "TurnError",
    "TurnToolCall",
    "TurnUsage",
    "echoed_key",
    "load_script",
    "main",
    "parse_script",
]
