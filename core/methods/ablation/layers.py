"""Layer sets for the ablations: named presets and the ``"1,3,5-7"`` notation (pure; no model).

Decoder layers are numbered from 0 (:mod:`core.model.parts`). A layer set is a sorted list of unique layer
indices; :func:`parse_layers` reads it from text a user typed (the Ablations page, ``core ablate --layers``)
and :func:`format_layers` writes it back compactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

PRESETS = ("early", "middle", "late", "control", "all")
"""Named layer sets: the three thirds of the decoder stack, CRM's ``early_control`` block (layers 0–7, the
paper's universal baseline in Table 5) and every layer."""

CONTROL_BLOCK = 8
"""CRM Table 5's early_control block: decoder layers 0 … 7."""

MAX_SHOWN = 5
"""Out-of-range layers named in an error message (the rest are summarized as "…")."""

MAX_ITEM_CHARS = 40
"""Characters of an unreadable item quoted back in an error message."""


def layer_preset(name: str, n_layers: int) -> list[int]:
    """A named layer set: ``early``/``middle``/``late`` thirds (bounds ``round(i·L/3)``), ``control`` (CRM's
    early_control block, layers 0–7) or ``all``.

    For 30 layers: early 0–9, middle 10–19, late 20–29, control 0–7.

    Raises:
        ValueError: an unknown name or ``n_layers < 1``.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    key = name.strip().lower()
    if key == "all":
        return list(range(n_layers))
    if key == "control":
        return list(range(min(CONTROL_BLOCK, n_layers)))
    bounds = [round(i * n_layers / 3) for i in range(4)]
    thirds = {"early": (bounds[0], bounds[1]), "middle": (bounds[1], bounds[2]), "late": (bounds[2], bounds[3])}
    if key not in thirds:
        raise ValueError(f"Unknown layer preset {_clip(name)!r}; choose one of {', '.join(PRESETS)}")
    lo, hi = thirds[key]
    if hi <= lo:  # fewer than three layers: a third may be empty; fall back to the nearest layer
        return [min(lo, n_layers - 1)]
    return list(range(lo, hi))


def parse_layers(spec: str | int | Sequence[int], n_layers: int) -> list[int]:
    """Decoder layers (0-based, sorted, unique) from ``"4-8"``, ``"3"``, ``"1,3,5-7"``, a preset name
    (``early``, ``middle``, ``late``, ``control``, ``all``; may be mixed with numbers in a comma list) or a list
    of ints.

    Every range is checked against ``0 … n_layers − 1`` *before* it is expanded, so ``"0-100000000"`` fails at
    once with a short message instead of building a hundred million layers; error messages name at most
    :data:`MAX_SHOWN` offending layers and quote at most :data:`MAX_ITEM_CHARS` characters of the input.

    Raises:
        ValueError: for an empty set, a malformed item or a layer outside ``0 … n_layers − 1``.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        items: list[Any] = [int(spec)]
    elif isinstance(spec, str):
        items = [s.strip() for s in spec.split(",") if s.strip()]
    else:
        items = list(spec)
    spans: list[tuple[int, int]] = []  # inclusive (lo, hi) stretches, checked before expansion
    for item in items:
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            spans.append((int(item), int(item)))
            continue
        text = str(item).strip().lower()
        if text in PRESETS:
            preset = layer_preset(text, n_layers)
            spans.append((preset[0], preset[-1]))  # every preset is contiguous
            continue
        spans.append(_read_span(text, item))
    if not spans:
        raise ValueError("No layers chosen: give at least one decoder layer.")
    bad = _out_of_range(spans, n_layers)
    if bad:
        raise ValueError(f"Layer(s) {bad} out of range: this model has decoder layers 0 … {n_layers - 1}.")
    out: set[int] = set()
    for lo, hi in spans:
        out.update(range(lo, hi + 1))
    return sorted(out)


def format_layers(layers: Sequence[int]) -> str:
    """``[4, 5, 6, 9]`` → ``"4-6,9"`` (the inverse of :func:`parse_layers` for numbers)."""
    xs = sorted({int(x) for x in layers})
    parts: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


# ----------------------------------------------------------------------------------------------------------
# Helpers


def _clip(text: object, limit: int = MAX_ITEM_CHARS) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks the cut)."""
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _read_span(text: str, item: object) -> tuple[int, int]:
    """``"7"`` → ``(7, 7)``, ``"4-8"`` → ``(4, 8)``.

    Raises:
        ValueError: a malformed item or a range that runs backwards.
    """
    pieces = text.split("-")
    try:
        if len(pieces) == 1:
            value = int(pieces[0])
            return value, value
        if len(pieces) == 2:
            lo, hi = int(pieces[0]), int(pieces[1])
            if hi < lo:
                raise ValueError(f"layer range {_clip(item)!r} runs backwards")
            return lo, hi
        raise ValueError
    except ValueError as exc:
        if "backwards" in str(exc):
            raise
        raise ValueError(
            f"Cannot read layer {_clip(item)!r}: use a layer number, a range like 4-8, a comma list, or one of "
            f"{', '.join(PRESETS)}"
        ) from None


def _out_of_range(spans: Sequence[tuple[int, int]], n_layers: int) -> str:
    """The first :data:`MAX_SHOWN` layers of ``spans`` outside ``0 … n_layers − 1``, as ``"30, 31, …"``.

    Only the out-of-range parts of each span are enumerated, lazily, so the cost does not depend on how long
    a range is. Returns ``""`` when every layer is in range.
    """
    outside: list[tuple[int, int]] = []
    for lo, hi in spans:
        if lo < 0:
            outside.append((lo, min(hi, -1)))
        if hi >= n_layers:
            outside.append((max(lo, n_layers), hi))
    if not outside:
        return ""
    outside.sort()

    def layers() -> Iterator[int]:  # increasing and unique; lazy, so only what is shown is enumerated
        last: int | None = None
        for lo, hi in outside:
            for x in range(lo if last is None else max(lo, last + 1), hi + 1):
                yield x
                last = x

    shown: list[int] = []
    for x in layers():
        shown.append(x)
        if len(shown) > MAX_SHOWN:
            break
    text = ", ".join(_clip(x, 12) for x in shown[:MAX_SHOWN])
    return text + (", …" if len(shown) > MAX_SHOWN else "")
