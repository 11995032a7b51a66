"""What a calibration may spend: its :class:`Budget` (rows or minutes), the pace constants used before a run has
measured its own, and the batch size that keeps a batch's logits in bounds (:func:`batch_size_for`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.engine import DualPathSettings
from core.model.handle import ModelHandle

DEFAULT_ROWS = 240
"""The default budget: rows scored (calibration and report together), within :data:`DEFAULT_MINUTES`."""
DEFAULT_MINUTES = 55.0
"""The default budget's time cap: the default run stops scoring rows early enough for the swap tests, the fits and
the card to end within this many minutes (the first stages included). On a 2-core CPU the embedded model scores
about 20 s a row and Gemma 3 270M about 30 s after an 18-minute CRM basis (docs/calibration.md), so the cap, not
the 240 rows, ends Gemma's default run; its card says how many rows it scored and what that costs."""
MIN_ROWS = 8
"""The smallest budget in rows."""
MAX_BUDGET_ROWS = 100_000
"""The largest budget in rows (the bundled rows file holds far fewer: a larger budget scores them all)."""
MIN_MINUTES = 1.0
MAX_MINUTES = 10_080.0
"""The largest budget in minutes: a week."""
MAX_ROWS = 2000
"""The most rows a minutes budget may score."""
FIT_RESERVE_S = 60.0
"""Seconds kept for the fits and the card when a minutes budget decides when the scoring stops."""
SWAP_COST = 0.9
"""A swap test's cost in scored rows before it is measured: up to three alternatives, each a retrieval-path
generation, and their completion steps (the embedded model's default run: 7.3 s a swap test against 8.6 s a row at
the end of the run, 0.85; with one alternative it was 0.7, and the default run overran its time cap by the
difference)."""
CRM_COST = 0.85
"""A CRM calibration prompt's cost in scored rows (two forwards over the prompt pair and the logit lens), before it
is measured: 9.8 s against 11.5 s a row on Gemma 3 270M once a row no longer computes ReDeEP's PKS
(docs/calibration.md); the CRM basis' stage starts only where its estimate fits in the time cap."""
PKS_COST = 1.0
"""A row's ReDeEP PKS (``redeep-pks``: a traced forward and two logit lenses per layer) in scored rows, before it is
measured: about 0.5 on the embedded model's 49k-token vocabulary, 2 on Gemma 3's 262k."""
MAX_BATCH_ROWS = 8
"""The most rows per batch (:func:`batch_size_for`)."""
BATCH_LOGITS_BYTES = 768 << 20
"""What one batch's float32 logits may hold (both answers while they are generated, the teacher-forced pass): on a
262k-token vocabulary (Gemma 3) a row's three 64-token logit blocks take 200 MB, so its batches hold 4 rows; the
embedded model's (49k) hold :data:`MAX_BATCH_ROWS`."""
_FORMS = "rows (e.g. 240 or 240rows) or minutes (e.g. 30m)"


@dataclass(frozen=True)
class Budget:
    """How much a calibration may spend: ``rows`` scored, or ``minutes`` of wall time (both ``None``: the default,
    :data:`DEFAULT_ROWS` rows within :data:`DEFAULT_MINUTES`)."""

    rows: int | None = None
    minutes: float | None = None

    @classmethod
    def parse(cls, text: str | int | None) -> Budget:
        """``None`` → the default; ``"240"`` / ``"240rows"`` → rows; ``"30m"`` / ``"30min"`` / ``"30minutes"`` →
        minutes.

        Raises:
            ValueError: an empty or blank text (leave the budget out for the default), anything else that is not a
                budget, or one outside :data:`MIN_ROWS`–:data:`MAX_BUDGET_ROWS` rows /
                :data:`MIN_MINUTES`–:data:`MAX_MINUTES` minutes; the message gives the allowed range.
        """
        if text is None:
            return cls()
        if isinstance(text, bool) or not isinstance(text, (str, int)):
            raise ValueError(f"--budget takes {_FORMS}, got {text!r}")
        text = str(text)
        if not text.strip():
            raise ValueError(f"--budget is empty: give {_FORMS}, or leave it out for the default")
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(rows?|m|min|mins|minutes?)?\s*", text.lower())
        if m is None:
            raise ValueError(f"--budget takes {_FORMS}, got {text!r}")
        value, unit = float(m.group(1)), m.group(2) or "rows"
        if unit.startswith("row"):
            if value != int(value) or not MIN_ROWS <= value <= MAX_BUDGET_ROWS:
                raise ValueError(
                    f"a budget in rows is a whole number from {MIN_ROWS} to {MAX_BUDGET_ROWS}, got {text.strip()!r}"
                )
            return cls(rows=int(value))
        if not MIN_MINUTES <= value <= MAX_MINUTES:
            raise ValueError(
                f"a budget in minutes is from {MIN_MINUTES:g} to {MAX_MINUTES:g} (a week), got {text.strip()!r}"
            )
        return cls(minutes=value)

    @property
    def row_cap(self) -> int:
        """The most rows this budget scores."""
        if self.rows is not None:
            return self.rows
        return MAX_ROWS if self.minutes is not None else DEFAULT_ROWS

    @property
    def is_default(self) -> bool:
        return self.rows is None and self.minutes is None

    @property
    def time_cap(self) -> float | None:
        """The minutes this budget may take: its own, :data:`DEFAULT_MINUTES` for the default, ``None`` for rows."""
        if self.minutes is not None:
            return self.minutes
        return DEFAULT_MINUTES if self.is_default else None

    def describe(self) -> str:
        if self.minutes is not None:
            return f"{self.minutes:g} minutes"
        if self.is_default:
            return f"{self.row_cap} rows within {DEFAULT_MINUTES:g} minutes (the default)"
        return f"{self.row_cap} rows"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "minutes": self.minutes,
            "row_cap": self.row_cap,
            "time_cap_minutes": self.time_cap,
            "default_rows": DEFAULT_ROWS,
        }


def batch_size_for(handle: ModelHandle, settings: DualPathSettings) -> int:
    """Rows per batch so that the batch's logits stay within :data:`BATCH_LOGITS_BYTES`: each row holds three
    ``max_new_tokens × V`` float32 blocks (its two generated answers, its teacher-forced parametric pass); between 1
    and :data:`MAX_BATCH_ROWS`."""
    per_row = 3 * max(1, settings.max_new_tokens) * max(1, handle.info.vocab_size) * 4
    return max(1, min(MAX_BATCH_ROWS, BATCH_LOGITS_BYTES // per_row))
