"""The one progress protocol of every long run: ``progress(done, total, text="")``.

A long run (a calibration over prompts, a scoring run over rows, a sweep over layers, SMA's generations, an
internals analysis) reports after each unit it finishes: ``done`` of ``total`` units, and optionally ``text``,
a few words saying what the unit was (``"retrieval path"``, ``"noise sweep"``). A run that has nothing to say
calls ``progress(done, total)``; every callback accepts both forms, so one callback serves every run::

    def progress(done: int, total: int, text: str = "") -> None:
        bar.progress(done / max(total, 1), text=f"{text} {done}/{total}".strip())

It lives in the model layer, the lowest one every user imports (engine, methods, evaluation, scale, CLI,
components), and is a :class:`typing.Protocol` so that a plain function with that signature is one.
(Generation steps between two reports are heard through :func:`core.model.handle.on_each_step`.)
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """``progress(done, total, text="")``: ``done`` of ``total`` units finished; ``text`` says what (or ``""``)."""

    def __call__(self, done: int, total: int, text: str = "", /) -> None: ...
