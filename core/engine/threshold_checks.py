"""The checks every τ file's fields pass (a threshold file, an upload, a session's τ, a calibration folder's
``tau.json``) and the bounds they check against, apart from the τ records themselves (:mod:`core.engine.threshold`).

* :func:`finite_number` — a finite int or float (never a bool);
* :func:`count_field` / :func:`text_field` — an integer in range, a short non-empty text;
* :func:`nesting` — how deep a JSON value nests (iteratively);
* :func:`check_log_tau` — τ(L) = exp(a + b · ln L) finite and positive at every L in 1 … :data:`MAX_SCORED_LENGTH`;
* :func:`json_fields` — a dataclass as a JSON-ready dict.

The axes calibration (:mod:`core.engine.axes_calibration`) and the τ(L) fit (:mod:`core.methods.repcs_length`) use
the same checks.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from core.io import MAX_JSON_DEPTH

MAX_SCORED_LENGTH = 65_536
"""The longest answer (scored tokens L) a τ must hold for: τ(L) must be a finite, positive number of nats for every
L in 1 … this (far above any answer the engine scores: the score window is at most 4,096 tokens)."""
MAX_COUNT = 10**9
"""Largest row count, length or seed a threshold file may state."""
MAX_TEXT_CHARS = 2_000
"""Longest name, source or formula text a threshold file may hold."""
_LOG_MAX = math.log(1.7976931348623157e308)  # ln of the largest float: e^x overflows above it
_LOG_MIN = math.log(2.2250738585072014e-308)  # ln of the smallest normal float: e^x is 0 (or denormal) below it


def finite_number(value: Any, name: str) -> float:
    """``value`` as a float, for a threshold file's field ``name``.

    Raises:
        ValueError: not a finite int or float (a bool is refused too).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{name!r} must be a finite number, got {value!r}")
    return float(value)


def count_field(value: Any, name: str, low: int = 0) -> int:
    """A threshold file's integer field: an int (not a bool) in ``low`` … :data:`MAX_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        raise ValueError(f"{name!r} must be an integer between {low} and {MAX_COUNT:,}, got {shown(value)}")
    return value


def shown(value: Any) -> str:
    """A field's value for a message: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def text_field(value: Any, name: str) -> str:
    """A threshold file's text field: a non-empty string of at most :data:`MAX_TEXT_CHARS` characters."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name!r} must be a non-empty string")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"{name!r} is {len(value):,} characters long; at most {MAX_TEXT_CHARS:,}")
    return value


def nesting(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep dicts and lists nest in ``value`` (iteratively: no recursion on a deep value), up to ``limit + 1``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            stack.extend((v, depth) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_log_tau(intercept: Any, slope: Any, name: str) -> None:
    """Refuse a τ(L) = exp(intercept + slope · ln L) that is not a finite, positive number of nats for every L in
    1 … :data:`MAX_SCORED_LENGTH` (checked at both ends in log space: with 0 ≤ slope ≤ 1 it is monotone between).

    Args:
        intercept, slope: arrays (or numbers) of fits, checked together; ``name`` says which in the message.

    Raises:
        ValueError: τ(L) would be 0 (e.g. intercept −800: every answer would read as "read") or overflow (e.g.
            intercept +800) somewhere in that range; the message gives the range of ln τ found.
    """
    a = np.asarray(intercept, dtype=np.float64)
    b = np.asarray(slope, dtype=np.float64)
    ends = np.concatenate([np.ravel(a), np.ravel(a + b * math.log(MAX_SCORED_LENGTH))])
    if ends.size and not (np.all(np.isfinite(ends)) and ends.min() >= _LOG_MIN and ends.max() <= _LOG_MAX):
        why = (
            "τ would be 0 there, and every answer would read as read from the context"
            if np.all(np.isfinite(ends)) and ends.min() < _LOG_MIN
            else "τ would overflow to infinity there"
        )
        raise ValueError(
            f"{name} gives τ(L) = exp({float(np.nanmin(ends)):.4g} … {float(np.nanmax(ends)):.4g}) nats for L = 1 … "
            f"{MAX_SCORED_LENGTH:,}: τ(L) must be a finite, positive number of nats at every length (ln τ between "
            f"{_LOG_MIN:.0f} and {_LOG_MAX:.0f}); {why}"
        )


def json_fields(record: Any) -> dict[str, Any]:
    """A dataclass's fields as a JSON-ready dict: :func:`dataclasses.asdict` with its tuples as lists."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(record).items()}
