"""The session-scoped LRU of components.lru (a plain dict stands in for st.session_state)."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from components.lru import SessionLRU, session_lru


def test_put_drops_the_least_recently_used_beyond_maxsize() -> None:
    state: dict = {}
    cache = session_lru("ror.test", 2, state=state)
    assert cache.put("a", 1) == 1
    cache.put("b", 2)
    assert cache.get("a") == 1, "a is now the most recently used"
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"] and "b" not in cache
    assert isinstance(state["ror.test"], OrderedDict), "entries live in the state, readable by tests"
    assert list(state["ror.test"].values()) == [1, 3]
    cache.put("a", 10)
    assert cache.values() == [3, 10] and len(cache) == 2


def test_peek_leaves_recency_and_get_returns_the_default() -> None:
    cache = session_lru("ror.test", 2, state={})
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1
    cache.put("c", 3)
    assert "a" not in cache, "peek did not refresh a"
    assert cache.get("missing", "none") == "none"
    assert cache.pop("b") == 2 and cache.pop("b") is None


def test_a_new_view_sees_the_same_entries() -> None:
    state: dict = {}
    session_lru("ror.test", 3, state=state).put(("model", 1), "x")
    again = session_lru("ror.test", 3, state=state)
    assert again.get(("model", 1)) == "x", "any hashable key; entries survive between views (script runs)"


def test_current_entry() -> None:
    state: dict = {}
    cache = session_lru("ror.test", 2, current="ror.test.last", state=state)
    assert cache.current() is None and cache.current_key() is None
    cache.put("a", 1)
    cache.set_current("a")
    assert state["ror.test.last"] == "a" and cache.current() == 1
    assert cache.is_current("a") and not cache.is_current("b")
    cache.put("b", 2)
    cache.put("c", 3)
    assert cache.current() is None, "the current entry was dropped"
    cache.clear()
    assert len(cache) == 0 and "ror.test.last" not in state
    with pytest.raises(ValueError, match="current="):
        session_lru("ror.other", 2, state=state).set_current("a")


def test_a_plain_dict_left_in_the_state_is_kept_in_order() -> None:
    state: dict = {"ror.test": {"a": 1, "b": 2}}
    cache = session_lru("ror.test", 2, state=state)
    cache.put("c", 3)
    assert cache.keys() == ["b", "c"]


@pytest.mark.parametrize("maxsize", [0, -1, 1.5, True])
def test_maxsize_must_be_a_positive_integer(maxsize) -> None:
    with pytest.raises(ValueError, match="maxsize"):
        SessionLRU("ror.test", maxsize, state={})


def test_name_and_current_key_are_checked() -> None:
    with pytest.raises(ValueError, match="name"):
        SessionLRU("", 2, state={})
    with pytest.raises(ValueError, match="differ"):
        SessionLRU("ror.test", 2, current="ror.test", state={})


def test_get_or_put_computes_only_a_missing_entry() -> None:
    cache = session_lru("ror.test", 2, state={})
    calls: list[str] = []

    def compute(value: int) -> int:
        calls.append(str(value))
        return value

    assert cache.get_or_put("a", lambda: compute(1)) == 1
    assert cache.get_or_put("a", lambda: compute(2)) == 1, "a stored entry is returned, not recomputed"
    cache.put("b", 2)
    cache.get_or_put("a", lambda: compute(3))
    cache.put("c", 3)
    assert calls == ["1"] and cache.keys() == ["a", "c"], "get_or_put refreshed a's recency"
