"""Access and size limits of the audit service: the bearer token, the body-size cap, the request limits.

The guard is a plain ASGI middleware that runs **before** routing and body parsing, so

* a request without the right ``Authorization: Bearer <token>`` gets 401 whatever its body (malformed JSON
  included), and the only trace it leaves is one log line with its method, path and client address — never
  its body, never the token it sent, never a database record;
* a body over ``max_body_bytes`` gets 413 before it is parsed (``Content-Length`` is checked first, and a
  body sent without one is counted as it arrives and cut off at the limit);
* a body that has not fully arrived within ``body_timeout_s`` (a ``Content-Length`` that promises more than
  the client sends) gets 408 and the connection is closed — it cannot hold the connection forever;
* a body nested deeper than :data:`~core.io.MAX_JSON_DEPTH` (JSON objects and arrays) gets 422 before it is
  parsed (the parser would otherwise fail on recursion and answer 400);
* a request still running when the server's graceful shutdown runs out (a forward pass that outlasts it) gets a
  503 saying so (``on_cancel``), never uvicorn's bare 500.

``/health`` and the OpenAPI pages (``/openapi.json``; ``/docs`` and ``/redoc`` only when the app serves them,
``serve --docs``) are open: they reveal no audit.
Tokens are compared in constant time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import os
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.io import MAX_JSON_DEPTH, KiB, json_depth, read_user_file

logger = logging.getLogger(__name__)

TOKEN_ENV = "READ_OR_RECALL_TOKEN"
"""Environment variable holding the service's bearer token (``--token-file`` takes precedence)."""
MIN_TOKEN_CHARS = 16
OPEN_PATHS = frozenset({"/health", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class AuditLimits:
    """What one request may ask of the service.

    Attributes:
        max_body_bytes: largest request body (413 above).
        max_batch_items: most pairs in one ``/audit/batch`` (413 above).
        max_prompt_tokens: most tokens of a retrieval prompt (413 above; ``None`` = the model's budget).
        max_new_tokens: most answer tokens a request that asks to generate may ask for (422 above).
        max_page: most records one ``/history`` page returns (422 above).
        max_request_tokens: most tokens one request may ask the model to read — both prompts of every item, plus
            the answer tokens asked for (413 ``work_budget`` above, before any model call).
        request_budget_s: the time budget of one request (seconds): one estimated to need more model time on
            this server is refused up front (413 ``time_budget``); one that runs past it (queued behind others)
            is stopped at its next forward pass, nothing stored (503).
        body_timeout_s: longest the server waits for a request's body to arrive (408 after; a ``Content-Length``
            that promises more than the client sends cannot hold a connection forever).
        header_timeout_s: longest a request's head (request line and headers) may take to arrive, from the
            connection's opening or the first byte after the previous response (408 and the connection closed
            after; :mod:`core.audit.protocol`).
    """

    max_body_bytes: int = 1_048_576
    max_batch_items: int = 64
    max_prompt_tokens: int | None = None
    max_new_tokens: int = 128
    max_page: int = 500
    max_request_tokens: int = 65_536
    request_budget_s: float = 60.0
    body_timeout_s: float = 30.0
    header_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_batch_items", "max_new_tokens", "max_page", "max_request_tokens"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 2:
            raise ValueError(f"max_prompt_tokens must be >= 2, got {self.max_prompt_tokens}")
        for name in ("request_budget_s", "body_timeout_s", "header_timeout_s"):
            value = float(getattr(self, name))
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)}")


def load_token(token_file: str | Path | None = None) -> str:
    """The bearer token: the first line of ``token_file`` when given, else ``$READ_OR_RECALL_TOKEN``.

    Raises:
        ValueError: no token, an unreadable file, or a token shorter than 16 characters.
    """
    if token_file is not None:
        try:
            raw = read_user_file(token_file, 4 * KiB, "token file")
            lines = raw.decode("utf-8-sig").strip().splitlines()  # an editor's byte-order mark is not the token
        except UnicodeDecodeError:
            raise ValueError(f"The token file {token_file} is not UTF-8 text.") from None
        except OSError as exc:
            raise ValueError(f"Cannot read a token from {token_file}: {exc}") from exc
        if not lines:
            raise ValueError(
                f"The token file {token_file} is empty: put the token on its first line (e.g. `python -c 'import "
                f"secrets; print(secrets.token_urlsafe(32))' > {token_file}`)."
            )
        token = lines[0].strip()
        source = str(token_file)
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        source = f"${TOKEN_ENV}"
        if not token:
            raise ValueError(
                f"The audit service needs a bearer token: set {TOKEN_ENV} or pass --token-file FILE (e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))' > token.txt`)."
            )
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise ValueError(f"The token in {source} must be at least {MIN_TOKEN_CHARS} characters with no spaces.")
    return token


async def _json_response(send: Send, status: int, payload: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps(payload).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


@dataclass
class GuardCounters:
    """What the guard refused since the server started (shown by ``GET /stats``)."""

    unauthorized: int = 0
    too_large: int = 0
    timed_out: int = 0
    head_timed_out: int = 0

    def head_timeout(self) -> None:
        """Count one request head that did not arrive in time (the protocol's callback)."""
        self.head_timed_out += 1


class GuardMiddleware:
    """Bearer-token check, body-size cap, body deadline and JSON depth in front of the app (see the module
    docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        max_body_bytes: int,
        counters: GuardCounters,
        body_timeout_s: float = AuditLimits.body_timeout_s,
        max_json_depth: int = MAX_JSON_DEPTH,
        on_cancel: Callable[[], str | None] | None = None,
    ) -> None:
        self.app = app
        self.on_cancel = on_cancel
        self._token = token.encode("utf-8")
        self.max_body_bytes = max_body_bytes
        self.counters = counters
        self.body_timeout_s = float(body_timeout_s)
        self.max_json_depth = int(max_json_depth)

    def _authorized(self, scope: Scope) -> tuple[bool, str]:
        header = b""
        for name, value in scope.get("headers") or []:
            if name.lower() == b"authorization":
                header = value
                break
        if not header:
            return False, "no Authorization header"
        scheme, _, credentials = header.partition(b" ")
        if scheme.lower() != b"bearer" or not credentials:
            return False, "not a bearer token"
        if not hmac.compare_digest(credentials.strip(), self._token):
            return False, "wrong token"
        return True, ""

    async def _read_body(
        self, scope: Scope, receive: Receive, send: Send, length: int | None, too_big: dict[str, Any]
    ) -> bytes | None:
        """The whole request body, bounded in size (413) and time (408); ``None`` when it was refused (the
        response sent) or the client went away."""
        chunks: list[bytes] = []
        size = 0
        more = True
        deadline = asyncio.get_running_loop().time() + self.body_timeout_s
        while more:
            left = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), timeout=max(left, 0.0))
            except TimeoutError:
                self.counters.timed_out += 1
                promised = f" of the {length:,} bytes its Content-Length announced" if length is not None else ""
                logger.warning("Timed out %s %s: %d bytes%s in %.0f s", scope.get("method"), scope.get("path"), size,
                               promised, self.body_timeout_s)  # fmt: skip
                detail = (
                    f"The request body did not arrive within {self.body_timeout_s:g} s (got {size:,} bytes"
                    f"{promised}); the connection is closed."
                )
                await _json_response(send, 408, {"detail": detail, "field": "body"}, [(b"connection", b"close")])
                return None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                self.counters.too_large += 1
                await _json_response(send, 413, too_big, [(b"connection", b"close")])
                return None
            chunks.append(chunk)
            more = bool(message.get("more_body"))
        return b"".join(chunks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        ok, reason = self._authorized(scope)
        if not ok:
            self.counters.unauthorized += 1
            client = scope.get("client") or ("?", 0)
            logger.warning("Rejected %s %s from %s: %s", scope.get("method"), scope.get("path"), client[0], reason)
            await _json_response(
                send, 401, {"detail": "Missing or invalid bearer token."}, [(b"www-authenticate", b"Bearer")]
            )
            return
        length = None
        for name, value in scope.get("headers") or []:
            if name.lower() == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = None
        too_big = {"detail": f"The request body is over the limit of {self.max_body_bytes:,} bytes.", "field": "body"}
        if length is not None and length > self.max_body_bytes:
            self.counters.too_large += 1
            await _json_response(send, 413, too_big, [(b"connection", b"close")])
            return
        # Read the whole body (bounded in size and time) before the app sees it, then hand it over in one message.
        body = await self._read_body(scope, receive, send, length, too_big)
        if body is None:
            return
        if json_depth(body.decode("utf-8", "replace"), stop_above=self.max_json_depth) > self.max_json_depth:
            error = {
                "loc": ["body"],
                "msg": f"JSON nested more than {self.max_json_depth} levels deep (objects and arrays); refused "
                "before parsing",
                "type": "json_invalid",
            }
            await _json_response(send, 422, {"detail": [error]}, [])
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, replay, tracked)
        except asyncio.CancelledError:  # the server's graceful shutdown ran out while this request still ran
            detail = None if started or self.on_cancel is None else self.on_cancel()
            if detail is None:
                raise
            headers = [(b"retry-after", b"10"), (b"connection", b"close")]
            await _json_response(send, 503, {"detail": detail}, headers)  # not uvicorn's bare 500
