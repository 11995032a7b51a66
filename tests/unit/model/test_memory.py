"""core.model.memory: the fixed mmap threshold (once per process) and the trim, no-ops off glibc."""

from __future__ import annotations

import pytest

from core.model import memory


def test_the_threshold_is_fixed_once_and_later_calls_say_the_same(monkeypatch):
    monkeypatch.setattr(memory, "_APPLIED", [])
    calls = []

    class Libc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

        def malloc_trim(self, pad):
            return 1

    monkeypatch.setattr(memory, "_libc", lambda: Libc())
    assert memory.fix_mmap_threshold() is True
    assert memory.fix_mmap_threshold(1 << 22) is True
    assert calls == [  # once per process
        (memory.M_MMAP_THRESHOLD, memory.MMAP_THRESHOLD_BYTES),
        (memory.M_TRIM_THRESHOLD, memory.TRIM_THRESHOLD_BYTES),
    ]
    assert memory.release_freed() is True


def test_without_glibc_nothing_is_changed(monkeypatch):
    monkeypatch.setattr(memory, "_APPLIED", [])
    monkeypatch.setattr(memory, "_libc", lambda: None)
    assert memory.fix_mmap_threshold() is False and memory.release_freed() is False
    with pytest.raises(ValueError, match="positive"):
        memory.fix_mmap_threshold(0)


def test_the_real_call_does_not_fail():
    assert memory.fix_mmap_threshold() in (True, False)
    assert memory.release_freed() in (True, False)
