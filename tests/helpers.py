"""Plain helpers shared by test modules (imported as ``from tests.helpers import …``; no fixtures here)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


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


def error_in_time(fn: Callable[[], Any], timeout: float = 10.0) -> BaseException | None:
    """What ``fn`` raised (``None`` when it returned), failing the test when it hangs (:func:`call_in_time`)."""
    return call_in_time(fn, timeout).get("error")


def dev_zero() -> str:
    """``/dev/zero`` (an endless device that reports size 0); the test is skipped where there is none."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    return "/dev/zero"


def named_pipe(folder: Path, name: str) -> Path:
    """A named pipe ``folder/name`` with no writer (a plain ``open`` for reading blocks forever); the test is
    skipped where the platform has none."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    fifo = folder / name
    os.mkfifo(fifo)
    return fifo
