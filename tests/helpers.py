"""Plain helpers shared by test modules (imported as ``from tests.helpers import …``; no fixtures here)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def call_in_time(fn: Callable[[], Any], timeout: float = 10.0) -> dict[str, Any]:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it does not return within ``timeout`` s.

    Returns:
        ``{"value": result}`` or ``{"error": exception}`` (any ``BaseException`` ``fn`` raised, handed back).
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the call hung"
    return box
