"""What a run holds, and what a call will compute: the notebook's visible cache.

A :class:`~read_or_recall.run.Run` remembers each analysis it computed (the internals, a Self-Critique run under
given settings, a swap test …) in a :class:`Memo`: ``run.computed()`` lists them with their settings and how long
each took, and ``run.estimate(verb, **settings)`` says — before the call — whether it is held already and, if not,
what it will compute and roughly how long, from this machine's measured unit costs
(:func:`core.engine.estimate.estimate`, the estimate the pages show under their buttons).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pandas as pd

    from core.engine.estimate import Estimate
    from core.model.handle import ModelHandle

T = TypeVar("T")


def settings_key(settings: Mapping[str, Any] | Any) -> str:
    """One analysis' settings as a short, stable text (the memo's key and what :meth:`Memo.frame` shows)."""
    if isinstance(settings, Mapping):
        return ", ".join(f"{k}={settings[k]!r}" for k in sorted(settings))
    return repr(settings)


@dataclass(frozen=True)
class Held:
    """One analysis a run holds: its name, its settings (as text) and the seconds it took."""

    analysis: str
    settings: str
    seconds: float


class Memo:
    """Analyses by ``(name, settings)``, each computed once; every one listed (:meth:`frame`)."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, str], tuple[Held, Any]] = {}

    def get(self, analysis: str, settings: str, compute: Callable[[], T]) -> T:
        """The held value of ``analysis`` under ``settings``, computed (and timed) the first time."""
        key = (analysis, settings)
        if key not in self._values:
            t0 = time.perf_counter()
            value = compute()
            self._values[key] = (Held(analysis, settings, time.perf_counter() - t0), value)
        return self._values[key][1]

    def holds(self, analysis: str, settings: str = "") -> bool:
        return (analysis, settings) in self._values

    def values(self, analysis: str) -> list[Any]:
        """Every held value of ``analysis`` (each settings), in the order they were made."""
        return [value for (name, _), (_, value) in self._values.items() if name == analysis]

    def frame(self) -> pd.DataFrame:
        """One row per held analysis: ``analysis``, ``settings``, ``seconds``."""
        import pandas as pd

        return pd.DataFrame(
            [vars(held) for held, _ in self._values.values()], columns=["analysis", "settings", "seconds"]
        )


@dataclass(frozen=True)
class Plan:
    """What a call will do before it runs (:meth:`read_or_recall.run.Run.estimate`).

    Attributes:
        verb: the method asked about.
        held: whether the run holds its result already (the call then computes nothing).
        computes: what it runs, in words (e.g. "2 generations of up to 32 tokens").
        estimate: the engine's :class:`~core.engine.estimate.Estimate` (``None``: not held, and this machine's unit
            costs are not measured yet; or held: nothing to wait for).
    """

    verb: str
    held: bool
    computes: str
    estimate: Estimate | None

    @property
    def text(self) -> str:
        """One sentence, as the page's caption under its button."""
        from core.engine.estimate import describe_estimate

        if self.held:
            return f"{self.verb}: held by this run, nothing to compute."
        return f"{self.verb}: {self.computes} — {describe_estimate(self.estimate)}."

    def to_dict(self) -> dict[str, Any]:
        e = self.estimate
        seconds = None if e is None else {"central": e.seconds, "low": e.low, "high": e.high}
        return {"verb": self.verb, "held": self.held, "computes": self.computes, "seconds": seconds}

    def __repr__(self) -> str:
        return f"<Plan {self.text}>"


def plan(handle: ModelHandle, verb: str, held: bool, generations: int, tokens: int, forwards: int) -> Plan:
    """A :class:`Plan` of ``generations`` generations of up to ``tokens`` tokens each and ``forwards`` forward
    passes, its time from the machine's unit costs (as the pages estimate)."""
    from core.engine.estimate import estimate

    parts = []
    if generations:
        parts.append(f"{generations} generation{'s' * (generations != 1)} of up to {tokens} tokens")
    if forwards:
        parts.append(f"{forwards} forward pass{'es' * (forwards != 1)}")
    work = {"generated_tokens": float(generations * tokens), "forwards": float(forwards)}
    return Plan(verb, held, " and ".join(parts) or "no model call", None if held else estimate(handle, **work))
