"""The audit service's HTTP/1.1 protocol: uvicorn's h11 protocol with a bound on the time to a request's head.

uvicorn (0.54) times out an idle keep-alive connection (``timeout_keep_alive``, 5 s, after a response) but not a
request head that arrives slowly: a client that sends a request line and then one header byte a second holds its
connection — and one of the server's file descriptors — for as long as it likes (issue 43 D; the body has its own
bound, :class:`core.audit.auth.GuardMiddleware`'s ``body_timeout_s``). :func:`head_timeout_protocol` makes a
subclass of :class:`uvicorn.protocols.http.h11_impl.H11Protocol` whose connections must deliver each request's
complete head (request line and headers) within ``seconds`` of its start — the connection's opening, or the
first byte after the previous response — else they get **408** with ``Connection: close`` and are closed. The
app never sees such a request (it has no head to route), so the refusal is written here, in the service's JSON
shape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from typing import Any

logger = logging.getLogger(__name__)


def _timeout_response(seconds: float) -> bytes:
    """A complete 408 response (the app never saw the request, so it is written at the protocol level)."""
    body = json.dumps(
        {
            "detail": f"The request's head (request line and headers) did not arrive within {seconds:g} s; the "
            "connection is closed.",
            "field": "headers",
        }
    ).encode("utf-8")
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def head_timeout_protocol(seconds: float, on_timeout: Any = None) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, with each request's head due within ``seconds`` (a positive number).

    Args:
        on_timeout: called with no argument each time a head times out (the service's counter), or ``None``.

    Returns:
        A protocol class for ``uvicorn.Config(http=…)``.

    Raises:
        ValueError: ``seconds`` is not a positive, finite number.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    seconds = float(seconds)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"the header timeout must be a positive number of seconds, got {seconds}")
    response = _timeout_response(seconds)

    class HeadTimeoutProtocol(H11Protocol):
        """:class:`H11Protocol` with a deadline on each request head (see :mod:`core.audit.protocol`)."""

        head_timeout_s = seconds
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # a connection that never sends a byte is held no longer than a slow head

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm()  # the first byte of a new request head (after a response: keep-alive is over)
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
                self._disarm()  # the head is complete (or refused as malformed): the body has its own bound

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # a pipelined request's head was already buffered and parsed

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            client = self.client[0] if self.client else "?"
            logger.warning("Timed out a request head from %s after %g s; connection closed", client, seconds)
            if on_timeout is not None:
                on_timeout()
            self._unset_keepalive_if_required()
            self.transport.write(response)
            self.transport.close()

    return HeadTimeoutProtocol
