"""Who may use Treadle's HTTP services (the API, the page that uses it, and the servers that
speak other protocols over the same runs): the access token, the host it is asked for by, the
origins allowed, and CSRF.

- **Access token** (required as soon as a service listens beyond loopback: ``Guard`` refuses to
  be made without one): ``Authorization: Bearer TOKEN`` from a program. The page's printed URL
  carries it once (``/?token=...``); the page answers that with an ``HttpOnly`` cookie and a
  redirect to the same path without it, so the token stays out of the page, its links and the
  browser's history.
- **Host**: on loopback a request must name a loopback host (``127.0.0.1``, ``localhost``,
  ``[::1]``), so a web page whose domain is re-pointed at 127.0.0.1 (DNS rebinding) is refused.
- **Origins**: a request that changes something and names an ``Origin`` must come from the
  service's own, or from one configured (``origins``, which are then also answered CORS
  headers by ``cors``); no cross-origin access otherwise.
- **Changes** are ``POST``s with a JSON body (``Content-Type: application/json``: a page on
  another origin cannot send that without a preflight it would fail). A request carrying the
  page's cookies also needs the header ``X-Treadle-CSRF`` equal to the ``treadle_csrf`` cookie
  (double submit); a program with a bearer token, or with no cookie at all, does not.

Nothing secret is ever written into a page: the CSRF cookie is random per browser, and the token
lives in a cookie the page's scripts cannot read.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Sequence
from urllib.parse import urlencode

from starlette.datastructures import Headers, QueryParams
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "TOKEN_COOKIE",
    "Guard",
    "check_access",
    "cors",
    "new_token",
]

TOKEN_COOKIE = "treadle_ui_token"
CSRF_COOKIE = "treadle_csrf"
CSRF_HEADER = "x-treadle-csrf"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")
_SAFE = ("GET", "HEAD")
_BODIED = ("POST", "PUT", "PATCH")
HEADERS = {
    # Nothing is cached (a run's status changes under the same URL); the page loads nothing
    # from anywhere else, runs no inline script, and is never framed.
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def new_token() -> str:
    return secrets.token_urlsafe(24)


class Guard:
    """ASGI middleware: the token, host, origin and CSRF checks above, before the app sees a
    request.

    ``token`` ``None``: no token (loopback only: a ``ValueError`` otherwise). ``loopback``: the
    server listens on loopback, so the ``Host`` header must be a loopback name. ``origins``:
    other origins allowed to make changes (``https://app.example``). ``max_body``: the largest
    ``Content-Length`` taken (413 beyond), for every service behind it alike."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        loopback: bool,
        origins: Sequence[str] = (),
        max_body: int | None = None,
    ) -> None:
        check_access(token, loopback)
        self.max_body = max_body
        self.app = app
        self.token = token
        self.loopback = loopback
        self.origins = frozenset(o.rstrip("/") for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        csrf_new = None if _cookie(headers, CSRF_COOKIE) else secrets.token_urlsafe(18)

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                if csrf_new is not None and _html(message):
                    # The first page a browser opens gives it its own random CSRF cookie; the
                    # page's scripts send it back. A program's JSON answers set no cookie.
                    cookie = Response()
                    cookie.set_cookie(CSRF_COOKIE, csrf_new, httponly=False, samesite="strict")
                    extra += [(k, v) for k, v in cookie.raw_headers if k == b"set-cookie"]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send_guarded)
            return
        await self.app(scope, receive, send_guarded)

    def _refusal(self, scope: Scope, headers: Headers) -> Response | None:
        host = headers.get("host", "")
        if self.loopback and _host_name(host) not in LOOPBACK_NAMES:
            return _error(421, f"this page answers on loopback names only, not {host!r}")
        method = scope["method"]
        if self.token is not None:
            query = QueryParams(scope.get("query_string", b""))
            given = query.get("token")
            if given is not None and method in _SAFE and _same(given, self.token):
                return _enter(scope["path"], query, self.token)
            if not (
                _same(_cookie(headers, TOKEN_COOKIE) or "", self.token)
                or _same(_bearer(headers), self.token)
            ):
                return _error(
                    401,
                    "an access token is needed: send Authorization: Bearer TOKEN "
                    "(the page: open the URL it printed)",
                )
        if method in _SAFE:
            return None
        origin = headers.get("origin")
        if (
            origin is not None
            and origin.split("://", 1)[-1] != host
            and origin.rstrip("/") not in self.origins
        ):
            return _error(403, f"a request from {origin} is not this service's own")
        length = headers.get("content-length", "")
        if self.max_body is not None and length.isdigit() and int(length) > self.max_body:
            return _error(413, f"body larger than {self.max_body} bytes")
        if method in _BODIED and not headers.get("content-type", "").startswith("application/json"):
            return _error(415, "send JSON (Content-Type: application/json)")
        if self.token is not None and _same(_bearer(headers), self.token):
            return None  # a program with the token, not a browser carrying cookies
        if _cookie(headers, TOKEN_COOKIE) is None and _cookie(headers, CSRF_COOKIE) is None:
            return None  # a program on loopback: no cookie of ours a foreign page could ride
        csrf = _cookie(headers, CSRF_COOKIE)
        if not csrf or not _same(headers.get(CSRF_HEADER, ""), csrf):
            return _error(403, "missing or wrong CSRF header; reload the page")
        return None


def check_access(token: str | None, loopback: bool) -> None:
    """A service beyond loopback needs a token: ``ValueError`` when it has none (called when
    an app is made, before anything listens)."""
    if token is None and not loopback:
        raise ValueError("a service listening beyond loopback needs an access token")


def cors(app: ASGIApp, origins: Sequence[str]) -> ASGIApp:
    """``app`` answering the CORS headers ``origins`` need (none when there are none): reads
    and changes with a bearer token, streams resumed with ``Last-Event-ID``; never cookies."""
    if not origins:
        return app
    return CORSMiddleware(
        app,
        allow_origins=[o.rstrip("/") for o in origins],
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        allow_credentials=False,
        max_age=600,
    )


def _html(start: Message) -> bool:
    return any(
        k.lower() == b"content-type" and v.startswith(b"text/html")
        for k, v in start.get("headers", [])
    )


def _enter(path: str, query: QueryParams, token: str) -> Response:
    """The token from the printed URL becomes a cookie; the address loses it."""
    rest = [(k, v) for k, v in query.multi_items() if k != "token"]
    response = RedirectResponse(path + (f"?{urlencode(rest)}" if rest else ""), 303)
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
    return response


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status)


def _same(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def _bearer(headers: Headers) -> str:
    value = headers.get("authorization", "")
    return value[7:].strip() if value.lower().startswith("bearer ") else ""


def _cookie(headers: Headers, name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
