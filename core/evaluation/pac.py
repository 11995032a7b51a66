"""RePCS' PAC sample size (Theorem III.4), n ≥ 8 γ² T Δ⁻² log(2/ε), for each reading of γ and of T.

The table :func:`pac_table` beside a calibration (:mod:`core.evaluation.calibration`) and :func:`pac_summary`
over evaluation records (the report's ``"pac"`` entry).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.evaluation.length_rates import scored_lengths
from core.methods.repcs import pac_sample_size

DEFAULT_EPSILON = 0.05


def pac_table(
    gamma_token: float,
    gamma_vocab: float | None,
    delta: float | None,
    T: int,
    n_scored: np.ndarray | None,
    epsilon: float = DEFAULT_EPSILON,
) -> dict[str, Any]:
    """The PAC sample size n ≥ 8 γ² T Δ⁻² log(2/ε) (RePCS Thm III.4) for each reading of γ and of T.

    * γ: ``"vocabulary"`` — max over rows, scored tokens and every vocabulary entry that enters the KL of
      |log P_rag − log P_para|, the quantity Lemma III.3 assumes bounded (its proof bounds the log-ratio
      X_i of every outcome the KL averages over); ``"realised_token"`` — the same at the realised answer
      token only (γ̂, what earlier versions reported). The realised-token γ̂ is never larger, so the n it gives
      is optimistic.
    * T: ``"nominal"`` — the window T; ``"max"``, ``"mean"``, ``"median"`` of the scored tokens
      L = min(T, answer length): Z of a row sums L terms, so its variance proxy is 2γ²L (``"max"`` is the
      conservative effective T over these rows).

    Args:
        gamma_token, gamma_vocab: the two γ (nats); ``gamma_vocab`` ``None`` when the rows lack it.
        delta: Δ̂ (nats); no n without a positive gap.
        n_scored: L per row, or ``None``.

    Returns:
        JSON-ready: ``gamma`` and ``T`` (each reading's value), ``n`` (``{gamma reading: {T reading: n}}``,
        ``None`` where undefined), ``delta``, ``epsilon`` and a ``note``.
    """
    gammas: dict[str, float | None] = {"vocabulary": gamma_vocab, "realised_token": float(gamma_token)}
    Ts: dict[str, float | None] = {"nominal": float(T), "max": None, "mean": None, "median": None}
    if n_scored is not None and np.asarray(n_scored).size:
        L = np.asarray(n_scored, dtype=np.float64)
        Ts.update(max=float(L.max()), mean=float(L.mean()), median=float(np.median(L)))
    n: dict[str, dict[str, int | None]] = {}
    for g_name, g in gammas.items():
        n[g_name] = {}
        for t_name, t in Ts.items():
            ok = g is not None and t is not None and t >= 1 and delta is not None and delta > 0
            n[g_name][t_name] = pac_sample_size(float(g), t, float(delta), epsilon) if ok else None  # type: ignore[arg-type]
    return {
        "gamma": gammas,
        "T": Ts,
        "delta": delta,
        "epsilon": epsilon,
        "n": n,
        "note": (
            "n ≥ 8 γ² T Δ⁻² log(2/ε). Lemma III.3 bounds |log P_rag − log P_para| over the vocabulary entries that "
            "enter the KL: the 'vocabulary' γ is that bound as observed; 'realised_token' looks at the answer token "
            "only and understates it. Z sums L = min(T, answer length) tokens: the effective T (max/mean/median L) "
            "is what the rows actually sum."
        ),
    }


def max_or_none(values: np.ndarray | Sequence[float | None] | None) -> float | None:
    """The largest value, or ``None`` when there are none or any is missing."""
    if values is None:
        return None
    items = list(values)
    if not items or any(v is None for v in items):
        return None
    return float(np.max(np.asarray(items, dtype=np.float64)))


def pac_summary(records: Sequence[dict[str, Any]], T: int, epsilon: float = DEFAULT_EPSILON) -> dict[str, Any] | None:
    """:func:`pac_table` over evaluation records (γ over all rows, Δ̂ = mean Z grounded − mean Z memorized,
    L = min(T, ``n_tokens``)); ``None`` without records of both labels."""
    labeled = [r for r in records if r.get("label") in ("memorized", "grounded") and r.get("repcs_score") is not None]
    z_mem = [float(r["repcs_score"]) for r in labeled if r["label"] == "memorized"]
    z_clean = [float(r["repcs_score"]) for r in labeled if r["label"] == "grounded"]
    if not z_mem or not z_clean:
        return None
    gamma = max(float(r.get("max_abs_log_ratio") or 0.0) for r in labeled)
    vocab = max_or_none([r.get("max_abs_log_ratio_vocab") for r in labeled])
    return pac_table(gamma, vocab, float(np.mean(z_clean) - np.mean(z_mem)), T, scored_lengths(labeled, T), epsilon)


__all__ = ["DEFAULT_EPSILON", "max_or_none", "pac_summary", "pac_table"]
