"""FPR and FNR per answer length: the check that a τ holds for short and long answers alike.

Z sums one KL term per scored answer token, so a constant τ errs more often on short grounded answers.
:func:`rates_by_length` reports, in the buckets :data:`LENGTH_BUCKETS` of L = min(T, answer length), FPR and
FNR with Wilson intervals for the paper's constant τ and for the length-aware τ(L), the share of each class
that τ(L)'s band leaves *inconclusive*, and the *confident* error rates (grounded rows called "recalled",
memorized rows called "read"). Used by the calibration report, ``python -m core evaluate`` and the Evaluate
page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.engine.threshold import TAU_LENGTH, TAU_PAPER, Threshold
from core.engine.verdict import INCONCLUSIVE, READ, RECALLED, decide

LENGTH_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 8), (9, 16), (17, 32), (33, 64), (65, None))
"""Buckets of L (scored answer tokens), inclusive; ``None`` = no upper end. Powers of two: τ(L) is a power law."""
CI_LEVEL = 0.95


def label_array(labels: np.ndarray) -> np.ndarray:
    """Labels as 0/1 ints (1 = memorized), from 0/1 values or the names "memorized" / "grounded".

    Raises:
        ValueError: any other label.
    """
    y = np.asarray(labels)
    if y.dtype.kind in "USO":
        y = np.array([1 if str(v) == "memorized" else 0 for v in y])
    y = y.astype(int)
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("labels must be 0/1 (1 = memorized) or 'memorized'/'grounded'")
    return y


def wilson_interval(k: int, n: int, level: float = CI_LEVEL) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion k/n (``None`` for n = 0).

    (p̂ + z²/2n ± z·sqrt(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n), z the standard normal (1 + level)/2 quantile; it
    stays inside [0, 1] and is not degenerate at k = 0 or k = n, unlike the Wald interval.
    """
    if n <= 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    from statistics import NormalDist

    zq = NormalDist().inv_cdf(0.5 + level / 2.0)
    p = k / n
    denom = 1.0 + zq * zq / n
    centre = (p + zq * zq / (2 * n)) / denom
    half = zq * math.sqrt(p * (1 - p) / n + zq * zq / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bucket_name(lo: int, hi: int | None) -> str:
    """``"9–16"`` or ``"65+"``."""
    return f"{lo}+" if hi is None else f"{lo}–{hi}"


def _share(mask: np.ndarray, within: np.ndarray) -> tuple[int, int, float | None, list[float] | None]:
    n = int(within.sum())
    k = int((mask & within).sum())
    ci = wilson_interval(k, n)
    return k, n, (k / n if n else None), (None if ci is None else [ci[0], ci[1]])


def rates_by_length(
    z: Sequence[float] | np.ndarray,
    labels: Sequence[Any] | np.ndarray,
    n_scored: Sequence[int] | np.ndarray,
    threshold: Threshold,
    *,
    buckets: Sequence[tuple[int, int | None]] = LENGTH_BUCKETS,
) -> list[dict[str, Any]]:
    """FPR / FNR per bucket of scored answer length, for the constant τ and (when ``threshold`` has one) τ(L).

    For each calibration and each bucket of L (then ``"all"``): ``fpr`` = share of grounded rows with
    Z < τ (resp. τ(L)), ``fnr`` = share of memorized rows with Z ≥ τ, each with its Wilson 95% interval
    (:func:`wilson_interval`) and counts; and from the verdicts (:func:`core.engine.verdict.decide`):
    ``inconclusive_grounded`` / ``inconclusive_memorized`` (shares left inconclusive) and ``confident_fpr``
    (grounded rows called "recalled") / ``confident_fnr`` (memorized rows called "read"). The constant τ has
    no band, so its verdicts are its rule (an empty answer aside).

    Args:
        z: Z per row (nats); labels: 1 / ``"memorized"`` or 0 / ``"grounded"``; n_scored: L per row.
        threshold: the calibration (its ``length_tau`` gives the length-aware rows).

    Returns:
        one dict per (calibration, bucket) with rows: ``calibration`` (``"paper"`` / ``"length"``), ``bucket``,
        ``lo``, ``hi``, ``n_grounded``, ``n_memorized``, the rates and CIs above, ``tau_low`` / ``tau_high``
        (the range of τ applied in the bucket's rows).
    """
    zz = np.asarray(z, dtype=np.float64)
    y = label_array(np.asarray(labels))
    L = np.asarray(n_scored).astype(np.int64)
    if not (zz.shape == y.shape == L.shape) or zz.ndim != 1:
        raise ValueError(f"z, labels and n_scored must be 1-D of one length: {zz.shape}, {y.shape}, {L.shape}")
    calibrations = [(TAU_PAPER, threshold.for_mode(TAU_PAPER))]
    if threshold.length_tau is not None:
        calibrations.append((TAU_LENGTH, threshold))
    out: list[dict[str, Any]] = []
    for name, th in calibrations:
        decisions = [decide(float(zi), int(li), th) for zi, li in zip(zz, L)]
        taus = np.array([th.tau_at(max(int(li), 1)) for li in L], dtype=np.float64)
        verdicts = np.array([d.verdict for d in decisions])
        flagged = zz < taus
        for lo, hi in [*buckets, (None, None)]:
            inside = np.ones_like(L, dtype=bool) if lo is None else (lo <= L) & (True if hi is None else hi >= L)
            grounded, memorized = inside & (y == 0), inside & (y == 1)
            k_fp, n_g, fpr, fpr_ci = _share(flagged, grounded)
            k_fn, n_m, fnr, fnr_ci = _share(~flagged, memorized)
            out.append(
                {
                    "calibration": name,
                    "bucket": "all" if lo is None else bucket_name(lo, hi),
                    "lo": lo,
                    "hi": hi,
                    "n_grounded": n_g,
                    "n_memorized": n_m,
                    "fpr": fpr,
                    "fpr_ci": fpr_ci,
                    "false_positives": k_fp,
                    "fnr": fnr,
                    "fnr_ci": fnr_ci,
                    "false_negatives": k_fn,
                    "inconclusive_grounded": _share(verdicts == INCONCLUSIVE, grounded)[2],
                    "inconclusive_memorized": _share(verdicts == INCONCLUSIVE, memorized)[2],
                    "confident_fpr": _share(verdicts == RECALLED, grounded)[2],
                    "confident_fnr": _share(verdicts == READ, memorized)[2],
                    "tau_low": float(taus[inside].min()) if inside.any() else None,
                    "tau_high": float(taus[inside].max()) if inside.any() else None,
                }
            )
    return out


def length_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """:func:`rates_by_length` as aligned text lines (the CLI's table), empty buckets left out."""

    def rate(value: float | None, ci: list[float] | None, n: int) -> str:
        if value is None:
            return f"{'–':>21s}"
        return f"{value:6.1%} [{ci[0]:4.0%}, {ci[1]:4.0%}] n={n:<3d}" if ci else f"{value:6.1%}"

    out = [f"{'τ':10s} {'L':>6s}  {'FPR (grounded)':>25s}  {'FNR (memorized)':>25s}  {'inconclusive g / m':>18s}"]
    for r in rows:
        if not r["n_grounded"] and not r["n_memorized"]:
            continue
        inc = (
            ""
            if r["calibration"] == TAU_PAPER
            else (f"{_pct(r['inconclusive_grounded'])} / {_pct(r['inconclusive_memorized'])}")
        )
        out.append(
            f"{'constant' if r['calibration'] == TAU_PAPER else 'τ(L)':10s} {r['bucket']:>6s}  "
            f"{rate(r['fpr'], r['fpr_ci'], r['n_grounded']):>25s}  {rate(r['fnr'], r['fnr_ci'], r['n_memorized']):>25s}"
            f"  {inc:>18s}"
        )
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def length_report(records: Sequence[dict[str, Any]], threshold: Threshold | None, T: int) -> dict[str, Any] | None:
    """:func:`rates_by_length` over evaluation records (``repcs_score``, ``label``, ``n_tokens``; L =
    min(T, ``n_tokens``)) as the report's ``"length_buckets"`` entry; ``None`` without a threshold, labels of
    both classes or answer lengths."""
    usable = [r for r in records if r.get("label") in ("memorized", "grounded") and r.get("n_tokens") is not None]
    if threshold is None or not usable:
        return None
    return {
        "tau_mode": threshold.mode,
        "buckets": [bucket_name(lo, hi) for lo, hi in LENGTH_BUCKETS],
        "ci": f"Wilson {CI_LEVEL:.0%}",
        "length_tau": None
        if threshold.length_tau is None
        else {k: v for k, v in threshold.length_tau.to_dict().items() if not k.startswith("boot_")},
        "tau_constant": float(threshold.tau),
        "rows": rates_by_length(
            [float(r["repcs_score"]) for r in usable],
            [r["label"] for r in usable],
            [min(int(T), int(r["n_tokens"])) for r in usable],
            threshold,
        ),
    }


def scored_lengths(records: Sequence[dict[str, Any]], T: int) -> np.ndarray | None:
    """L = min(T, n_tokens) per record, or ``None`` when a record has no ``n_tokens``."""
    if any(r.get("n_tokens") is None for r in records):
        return None
    return np.array([min(int(T), int(r["n_tokens"])) for r in records], dtype=np.int64)
