"""Context-text membership baselines as detectors: PPL, zlib, Min-K% and Min-K%++ (CRM appendix Q.1).

All four share one forward pass over the context per row (``keys.CONTEXT_TOKENS``). ``min_k_<k>`` and
``min_kpp_<k>`` exist for every integer 1 ≤ k ≤ 100: they are a detector *family* resolved by name
(:func:`core.detectors.registry.get`); k = 10 and 20, the CRM paper's values, are listed by default.
"""

from __future__ import annotations

from typing import Any

from core.detectors import keys
from core.detectors.registry import (
    CONTEXT_FAMILIARITY,
    CONTEXT_TEXT,
    GROUNDED_HIGH,
    MEMORIZED_HIGH,
    Detector,
    DetectorInput,
    declare,
    register_family,
)
from core.detectors.shared import text_pass
from core.methods.baselines import (
    DEFAULT_KS,
    context_token_stats,
    min_k_plus_plus,
    min_k_prob,
    perplexity,
    zlib_ratio,
)

MIN_K_PATTERN = r"min_k(?P<pp>pp)?_(?P<k>\d{1,3})"


def context_stats(inp: DetectorInput) -> dict[str, Any]:
    """The context's token statistics for the row, computed once (one forward pass, shared with RADAR's query
    when both are planned: :func:`core.detectors.shared.text_pass`)."""
    text_pass(inp)  # with RADAR's query in one forward, when both are planned
    if keys.CONTEXT_TOKENS not in inp.cache:
        inp.cache[keys.CONTEXT_TOKENS] = context_token_stats(inp.handle, inp.result.context)
    return inp.cache[keys.CONTEXT_TOKENS]


CONTEXT_NOTE = "scores the context text, not the answer"


def min_k_detector(k: int, plus_plus: bool) -> Detector:
    """The ``min_k_<k>`` (or ``min_kpp_<k>``) detector.

    Raises:
        ValueError: k outside 1 … 100.
    """
    k = int(k)
    if not 1 <= k <= 100:
        raise ValueError(f"Min-K% needs 1 <= k <= 100, got {k}")
    if plus_plus:
        return Detector(
            name=f"min_kpp_{k}",
            label=f"Min-{k}%++ of the context",
            higher_means=MEMORIZED_HIGH,
            score=lambda inp: (lambda s: min_k_plus_plus(s["logprob"], s["mu"], s["sigma"], k))(context_stats(inp)),
            source="Zhang et al. 2024 (Min-K%++)",
            short=f"Min-{k}%++",
            **SHARED,
        )
    return Detector(
        name=f"min_k_{k}",
        label=f"Min-{k}% Prob of the context",
        higher_means=MEMORIZED_HIGH,
        score=lambda inp: min_k_prob(context_stats(inp)["logprob"], k),
        source="Shi et al. 2024 (Min-K% Prob); CRM appendix Q.1",
        short=f"Min-{k}%",
        **SHARED,
    )


SHARED = {"cost": "forward", "group": CONTEXT_FAMILIARITY, "reads": frozenset({CONTEXT_TEXT})}
"""What every context baseline declares alike: one forward over the context text, shared by all of them."""

declare(
    {
        "name": "ppl",
        "label": "Perplexity of the context",
        "score": lambda inp: perplexity(context_stats(inp)["logprob"]),
        "source": "CRM appendix Q.1 (PPL)",
        "short": "perplexity",
    },
    {
        "name": "zlib",
        "label": "zlib ratio of the context (log PPL / zlib bytes)",
        "score": lambda inp: zlib_ratio(context_stats(inp)["logprob"], inp.result.context),
        "source": "Carlini et al. 2021; CRM appendix Q.1",
        "short": "zlib",
    },
    higher_means=GROUNDED_HIGH,
    note=CONTEXT_NOTE,
    **SHARED,
)
register_family(
    MIN_K_PATTERN,
    lambda m: min_k_detector(int(m.group("k")), bool(m.group("pp"))),
    listed=[f"min_k_{k}" for k in DEFAULT_KS] + [f"min_kpp_{k}" for k in DEFAULT_KS],
)
