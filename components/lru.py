"""One bounded, least-recently-used cache per browser session, kept in ``st.session_state``.

Every page that keeps its own results (dual-path runs, internals analyses, ablations, Self-Critique, SMA …)
uses :func:`session_lru` rather than a hand-written ``OrderedDict``::

    results = session_lru(keys.SC_RESULTS, 12, current=keys.SC_LAST)
    found = results.get_or_put(key, lambda: run(...))  # the least recently used entry beyond 12 is dropped
    results.set_current(key)                           # optional: "the entry shown last"
    shown = results.current()

The entries live in a plain ``OrderedDict`` at ``st.session_state[name]`` (oldest first), so a test can read
them as ``at.session_state[name].values()``. Nothing is shared between sessions; values are kept as given
(no copy), so store immutable results or plain data.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

import streamlit as st

V = TypeVar("V")


class SessionLRU(Generic[V]):
    """A view on an ``OrderedDict`` in session state that holds at most ``maxsize`` entries.

    :meth:`get` and :meth:`put` make an entry the most recently used; :meth:`put` then drops the least
    recently used ones beyond ``maxsize``. With ``current``, the key of one entry (e.g. the run shown last)
    is kept under that session-state key, beside the entries.

    Args:
        name: the session-state key of the entries (e.g. :data:`components.keys.RESULTS`).
        maxsize: the most entries kept (≥ 1).
        current: the session-state key of the current entry's key, or ``None`` for none.
        state: the mapping to keep everything in; ``st.session_state`` when ``None`` (tests pass a dict).
    """

    def __init__(
        self,
        name: str,
        maxsize: int,
        *,
        current: str | None = None,
        state: MutableMapping[str, Any] | None = None,
    ) -> None:
        if not name:
            raise ValueError("A session LRU needs a non-empty session-state key as its name.")
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be a positive integer, got {maxsize!r}.")
        if current == name:
            raise ValueError(f"The current-entry key must differ from the entries' key {name!r}.")
        self.name = name
        self.maxsize = maxsize
        self._current = current
        self._state: MutableMapping[str, Any] = st.session_state if state is None else state

    @property
    def _entries(self) -> OrderedDict[Hashable, V]:
        entries = self._state.get(self.name)
        if not isinstance(entries, OrderedDict):
            # first use in this session, or a plain dict left by an older version of a page: keep its order
            entries = OrderedDict(entries or {})
            self._state[self.name] = entries
        return entries

    def get(self, key: Hashable, default: V | None = None) -> V | None:
        """The entry for ``key`` (now the most recently used), else ``default``."""
        entries = self._entries
        if key not in entries:
            return default
        entries.move_to_end(key)
        return entries[key]

    def peek(self, key: Hashable, default: V | None = None) -> V | None:
        """The entry for ``key`` without touching its recency, else ``default``."""
        return self._entries.get(key, default)

    def put(self, key: Hashable, value: V) -> V:
        """Keep ``value`` under ``key`` as the most recently used entry, drop the oldest beyond ``maxsize``,
        and return ``value``."""
        entries = self._entries
        entries[key] = value
        entries.move_to_end(key)
        while len(entries) > self.maxsize:
            entries.popitem(last=False)
        return value

    def get_or_put(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The entry for ``key``, else ``compute()`` kept under it; either way now the most recently used."""
        found = self.get(key)
        return found if found is not None else self.put(key, compute())

    def pop(self, key: Hashable, default: V | None = None) -> V | None:
        """Remove the entry for ``key`` and return it, else ``default``."""
        return self._entries.pop(key, default)

    def clear(self) -> None:
        """Remove every entry (and the current key)."""
        self._entries.clear()
        if self._current is not None:
            self._state.pop(self._current, None)

    def set_current(self, key: Hashable) -> None:
        """Remember ``key`` as the current entry (needs ``current=`` at construction)."""
        if self._current is None:
            raise ValueError(f"The session LRU {self.name!r} was made without current=; it has no current entry.")
        self._state[self._current] = key

    def current_key(self) -> Hashable | None:
        """The key remembered by :meth:`set_current`, or ``None``."""
        return None if self._current is None else self._state.get(self._current)

    def current(self) -> V | None:
        """The current entry (recency untouched), or ``None`` when there is none or it was dropped."""
        key = self.current_key()
        return None if key is None else self._entries.get(key)

    def is_current(self, key: Hashable) -> bool:
        """Whether ``key`` is the current entry's key."""
        return self._current is not None and self._state.get(self._current) == key

    def keys(self) -> list[Hashable]:
        """The keys, least recently used first."""
        return list(self._entries)

    def values(self) -> list[V]:
        """The entries, least recently used first."""
        return list(self._entries.values())

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._entries))

    def __repr__(self) -> str:
        return f"SessionLRU({self.name!r}, maxsize={self.maxsize}, entries={len(self)})"


def session_lru(
    name: str, maxsize: int, *, current: str | None = None, state: MutableMapping[str, Any] | None = None
) -> SessionLRU[Any]:
    """The session's LRU cache ``name`` holding at most ``maxsize`` entries (see :class:`SessionLRU`).

    Cheap to call on every script run: the entries stay in session state, the returned object is a view.
    """
    return SessionLRU(name, maxsize, current=current, state=state)
