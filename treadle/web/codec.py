"""The codec server's app: Temporal's codec server protocol over a ``Keyring``.

    POST /encode   {"payloads": [{"metadata": {name: base64}, "data": base64}]} → encrypted
    POST /decode   the same shape → decrypted (payloads never encrypted come back unchanged)
    OPTIONS *      the browser's CORS preflight: 204

Every answer carries CORS headers for the Web UI's origin; a request from a browser on any other
origin is refused (403) before anything is decrypted. Errors are JSON ``{"error": ...}``: 400 for
a body that is not a Payloads object or a payload no key opens, 404 for another path, 405 for
another method, 411 without ``Content-Length``, 413 over ``MAX_BODY_BYTES``.
"""

from __future__ import annotations

import json
import logging

from google.protobuf import json_format
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.api.common.v1 import Payload, Payloads

from treadle.codec import EncryptionError, Keyring
from treadle.web.http import HttpError, error, json_app, read_body, route

__all__ = ["MAX_BODY_BYTES", "codec_app"]

log = logging.getLogger("treadle.codec_server")

MAX_BODY_BYTES = 16 * 1024 * 1024
"""A history event's payloads, base64-encoded, stay well below this (Temporal caps a payload at
2 MB by default)."""
READ_TIMEOUT = 30.0


def codec_app(keyring: Keyring, origin: str) -> ASGIApp:
    """The app: ``keyring`` encodes and decodes, for browsers on ``origin`` only."""

    async def encode(request: Request) -> Response:
        payloads = await _payloads(request)
        return _converted(Payloads(payloads=[keyring.encrypt_payload(p) for p in payloads]))

    async def decode(request: Request) -> Response:
        payloads = await _payloads(request)
        try:
            return _converted(Payloads(payloads=[keyring.decrypt_payload(p) for p in payloads]))
        except EncryptionError as exc:
            raise HttpError(400, str(exc)) from None

    return json_app(
        [route("/encode", encode, ("POST",)), route("/decode", decode, ("POST",))],
        log=log,
        event_prefix="codec_server",
        not_found=lambda path: f"no {path}; POST /encode or /decode",
        middleware=[Middleware(_Cors, origin=origin)],
    )


async def _payloads(request: Request) -> list[Payload]:
    body = await read_body(request, MAX_BODY_BYTES, timeout=READ_TIMEOUT, require_length=True)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise HttpError(400, f"not a Payloads JSON body: {_one_line(str(exc))}") from None
    if not isinstance(data, dict):
        raise HttpError(400, f"not a Payloads JSON body: a JSON {type(data).__name__}")
    try:  # protobuf's parser fails inside (SystemError) on a lone surrogate in a field's name
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise HttpError(400, "not a Payloads JSON body: a lone surrogate (\\ud800...)") from None
    try:
        return list(json_format.ParseDict(data, Payloads()).payloads)
    except json_format.ParseError as exc:
        raise HttpError(400, f"not a Payloads JSON body: {_one_line(str(exc))}") from None


def _converted(payloads: Payloads) -> Response:
    return JSONResponse(json_format.MessageToDict(payloads))


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Cors:
    """CORS for the Web UI's origin: its headers on every answer, the preflight answered, and a
    browser request from another origin refused (403)."""

    def __init__(self, app: ASGIApp, origin: str) -> None:
        self.app = app
        self.origin = origin
        self.headers = {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": "POST, OPTIONS",
            "Access-Control-Allow-Headers": "content-type, x-namespace",
            "Vary": "Origin",
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(self.headers)
            await send(message)

        origin = Headers(scope=scope).get("origin")
        if origin is not None and origin != self.origin:
            refused = error(403, f"origin {origin} is not allowed; see --origin")
            await refused(scope, receive, send_with_cors)
        elif scope["method"] == "OPTIONS":
            await Response(status_code=204)(scope, receive, send_with_cors)
        else:
            await self.app(scope, receive, send_with_cors)
