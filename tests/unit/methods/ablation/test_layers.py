"""Layer sets: presets, the ``"1,3,5-7"`` notation, and bounds checked before a range is expanded."""

from __future__ import annotations

import time

import pytest

from core.methods.ablation.layers import MAX_SHOWN, format_layers, layer_preset, parse_layers


def test_parse_layers_and_presets():
    assert parse_layers("4-8", 30) == [4, 5, 6, 7, 8]
    assert parse_layers("1,3,5-7", 30) == [1, 3, 5, 6, 7]
    assert parse_layers(" 7 ", 30) == [7]
    assert parse_layers([3, 1, 3], 30) == [1, 3]
    assert parse_layers("early", 30) == list(range(10))
    assert parse_layers("middle", 30) == list(range(10, 20))
    assert parse_layers("late", 30) == list(range(20, 30))
    assert parse_layers("early,25", 30) == [*range(10), 25]
    assert parse_layers("all", 3) == [0, 1, 2]
    assert parse_layers("control", 30) == list(range(8)) and parse_layers("control", 3) == [0, 1, 2]
    # thirds partition the stack for any depth
    for n in (1, 2, 3, 7, 30, 32, 48):
        parts = [layer_preset(p, n) for p in ("early", "middle", "late")]
        if n >= 3:
            assert sorted(x for part in parts for x in part) == list(range(n))
    assert format_layers([4, 5, 6, 9, 11, 12]) == "4-6,9,11-12"
    assert parse_layers(format_layers([0, 2, 3, 4, 29]), 30) == [0, 2, 3, 4, 29]
    for bad in ("30", "8-4", "x", "", "1-2-3", "-1", "middle_ish"):
        with pytest.raises(ValueError):
            parse_layers(bad, 30)


def test_out_of_range_layers_are_named_in_order():
    with pytest.raises(ValueError, match=r"Layer\(s\) 30, 31 out of range: this model has decoder layers 0 … 29"):
        parse_layers("28-31", 30)
    with pytest.raises(ValueError, match=r"Layer\(s\) -2, 40 out of range"):
        parse_layers([40, -2, 3], 30)
    with pytest.raises(ValueError, match=r"Layer\(s\) 30, 31, 32, 33, 34, … out of range"):
        parse_layers("31-33,30,35-36,34", 30)


@pytest.mark.parametrize("spec", ["0-2000000", "0-100000000", "5,0-999999999999999999", "early,10-10000000000"])
def test_a_huge_range_fails_fast_with_a_short_message(spec):
    """Issue 17 item 1: the range used to be expanded before the bounds check (``0-2000000`` gave a 16.9 MB
    message, ``0-100000000`` ran out of memory)."""
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="out of range") as info:
        parse_layers(spec, 30)
    assert time.perf_counter() - t0 < 0.5
    message = str(info.value)
    assert len(message) < 200, message
    assert message.count(",") <= MAX_SHOWN and "…" in message


def test_unreadable_items_are_quoted_short():
    with pytest.raises(ValueError, match="Cannot read layer") as info:
        parse_layers("x" * 1_000_000, 30)
    assert len(str(info.value)) < 250
    with pytest.raises(ValueError, match="Cannot read layer") as info:  # beyond Python's int() digit limit
        parse_layers("9" * 10_000, 30)
    assert len(str(info.value)) < 250
    with pytest.raises(ValueError, match="out of range") as info:  # a long but readable number
        parse_layers("9" * 4000, 30)
    assert len(str(info.value)) < 200
    with pytest.raises(ValueError, match="runs backwards") as info:
        parse_layers("9" * 4000 + "-1", 30)
    assert len(str(info.value)) < 200
