"""Fit the two axes of the headline verdict (core.engine.axes) on calibration rows only, and measure the headline
against behavior on the report rows.

Input: the JSON lines of ``scripts/score_axes_rows.py`` (each row with its dual-path result). Each row is labeled
by what the model's answer *with the context* contains (the behavior rule of ``assets/behavior/README.md``):

* behavior rows (and their paraphrases): the context's object and not the remembered one → read; the remembered
  one and not the context's → recalled; neither or both → left out;
* ``clean`` rows (invented facts): read when the answer contains the context's answer, else left out;
* ``memorized`` rows (known facts, the context agrees): recalled when the answer contains the fact, else left out.

Fits on rows whose ``split`` is ``calibration`` (never a report row, never a bundled example): axis 1's logistic
regression (label read), axis 2's cut on the parametric log-probability (label recalled). Writes
``assets/thresholds/axes-embedded.json``, ``assets/calibration/axes_calibration.csv`` (the calibration rows'
features and labels, so ``--from-features`` refits without the model) and ``assets/calibration/widened_clean.csv``
(the read calibration rows' Z and L, for ``scripts/calibrate_threshold.py --widen``). ``--measure`` prints the
headline against behavior on the report rows (conflict rows, the whole split, NQ-Swap rows) and writes it as JSON;
rows of another behavior-labeled set (``scripts/score_axes_rows.py --heldout CSV``) count as report rows. With
``--from-features --no-write --measure``, the fit comes from the bundled features and ``--rows`` are only measured.

    python scripts/calibrate_axes.py [--rows FILE …] [--from-features] [--measure out/axes/measure.json]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from core.engine.axes import headline, reliance_features, support_features
from core.engine.axes_calibration import AXES_FILE, RELIANCE_FEATURES, AxesCalibration
from core.engine.result import DualPathResult
from core.evaluation.behavior import behavior_label, in_subset
from core.io import asset_path, atomic_write_text

FEATURES_CSV = asset_path("calibration") / "axes_calibration.csv"
WIDENED_CSV = asset_path("calibration") / "widened_clean.csv"
"""The read calibration rows of the behavior set (conflict, invented and project rows; answers of 1–16 tokens)
with Z and L: the extra clean rows ``scripts/calibrate_threshold.py --widen`` fits τ(L) on (issue 23 part 4)."""
WIDENED_COLUMNS = ["set", "kind", "query", "z", "n_scored"]
COLUMNS = [
    "set",
    "kind",
    "origin",
    "label",
    "query",
    *RELIANCE_FEATURES,
    "support_logprob",
    "in_parametric",
    "in_context",
]


def label(row: dict[str, str], answer: str) -> str | None:
    """The behavior label of one scored row (``None``: left out), by the behavior set's own matcher
    (:func:`core.evaluation.behavior.behavior_label`)."""
    origin = row.get("origin") or row["set"]
    if origin in ("clean", "memorized"):
        lab, _ = behavior_label(answer, row["answer"], None)
        return None if lab is None else ("read" if origin == "clean" else "recalled")
    lab, _ = behavior_label(answer, row.get("answer_context", ""), row.get("answer_memory", ""))
    return lab


def load_rows(path: Path) -> list[tuple[dict[str, str], DualPathResult, str | None]]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            res = DualPathResult.from_dict(item["result"])
            out.append((item["row"], res, label(item["row"], res.retrieval.answer)))
    return out


def feature_rows(scored: list[tuple[dict[str, str], DualPathResult, str | None]]) -> list[dict[str, Any]]:
    rows = []
    for row, res, lab in scored:
        if row["split"] != "calibration" or lab is None:
            continue
        feats, sup = reliance_features(res), support_features(res)
        if feats is None or sup["logprob"] is None:
            continue
        rows.append(
            {
                "set": row["set"],
                "kind": row["kind"],
                "origin": row.get("origin", row["set"]),
                "label": lab,
                "query": row["query"],
                **{k: round(v, 6) for k, v in feats.items()},
                "support_logprob": round(sup["logprob"], 6),
                "in_parametric": sup["in_parametric"],
                "in_context": sup["in_context"],
            }
        )
    return rows


def widened_rows(scored: list[tuple[dict[str, str], DualPathResult, str | None]]) -> list[dict[str, Any]]:
    """The read-labeled behavior calibration rows with their Z and L (never a report row)."""
    return [
        {
            "set": row["set"],
            "kind": row["kind"],
            "query": row["query"],
            "z": round(res.repcs_score, 6),
            "n_scored": res.n_scored,
        }
        for row, res, lab in scored
        if row["set"] == "behavior" and row["split"] == "calibration" and lab == "read" and res.n_scored >= 1
    ]


def _csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def fit(rows: list[dict[str, Any]], model: str) -> AxesCalibration:
    from core.methods.axes_fit import fit_axes

    X = np.array([[float(r[k]) for k in RELIANCE_FEATURES] for r in rows])
    read = np.array([r["label"] == "read" for r in rows])
    lp = np.array([float(r["support_logprob"]) for r in rows])
    joint = np.column_stack([X, lp, [_joint_flags(r) for r in rows]])
    counts: dict[str, Any] = {"rows": len(rows), "read": int(read.sum()), "recalled": int((~read).sum())}
    for key in ("set", "kind"):
        for value in sorted({r[key] for r in rows}):
            counts[f"{key}:{value}"] = sum(r[key] == value for r in rows)
    counts["report_rows"] = 0
    return fit_axes(
        X,
        read,
        lp,
        ~read,
        model=model,
        source="scripts/calibrate_axes.py on calibration rows (assets/calibration/axes_calibration.csv)",
        fitted_on=counts,
        joint_X=joint,
    )


def _flag(value: Any) -> bool | None:
    """A CSV's or a row's True/False/empty as ``True``/``False``/``None``."""
    if value is None or value == "":
        return None
    return value is True or str(value).strip().lower() == "true"


def _joint_flags(row: dict[str, Any]) -> list[float]:
    """The joint resolver's three text observations (in_parametric, not_in_parametric, in_context) as 0/1."""
    para = _flag(row.get("in_parametric"))
    return [float(para is True), float(para is False), float(bool(_flag(row.get("in_context"))))]


def _rate(values: list[bool]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def measure(scored: list[tuple[dict[str, str], DualPathResult, str | None]], cal: AxesCalibration) -> dict[str, Any]:
    """Headline vs behavior on the report rows of the behavior set: conflict rows, all, NQ-Swap (``prose``).
    A row counts with the behavior label of the set (its 16-token build answer); ``relabel`` is this run's."""
    rows = []
    for row, res, lab in scored:
        if row["set"] not in ("behavior", "heldout") or row["split"] != "report":
            continue
        head = headline(res, cal)
        rows.append(
            {
                "kind": row["kind"],
                "behavior": row["behavior"],
                "relabel": lab,
                "verdict": head.verdict,
                "repcs": res.verdict,
            }
        )
    groups = {name: [r for r in rows if in_subset(r["kind"], name)] for name in ("conflict", "all", "prose")}
    out: dict[str, Any] = {}
    for name, group in groups.items():
        decisive = [r for r in group if r["verdict"] in ("read", "recalled")]
        entry: dict[str, Any] = {
            "n": len(group),
            "decisive": len(decisive),
            "match_decisive": _rate([r["verdict"] == r["behavior"] for r in decisive]),
            "inconclusive": _rate([r["verdict"] == "inconclusive" for r in group]),
            "neither": _rate([r["verdict"] == "neither" for r in group]),
        }
        entry["repcs_match_decisive"] = _rate(
            [r["repcs"] == r["behavior"] for r in group if r["repcs"] in ("read", "recalled")]
        )
        entry["repcs_inconclusive"] = _rate([r["repcs"] not in ("read", "recalled") for r in group])
        for beh in ("read", "recalled"):
            sub = [r for r in group if r["behavior"] == beh]
            entry[f"n_{beh}"] = len(sub)
            entry[f"match_{beh}"] = _rate([r["verdict"] == beh for r in sub])
        out[name] = entry
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, nargs="+", default=[Path("out/axes/rows.jsonl")])
    ap.add_argument("--from-features", action="store_true", help="refit from axes_calibration.csv (no results)")
    ap.add_argument("--measure", type=Path, default=None, help="write the report-split figures here")
    ap.add_argument("--no-write", action="store_true", help="fit and print, leave the bundled files alone")
    args = ap.parse_args()

    measuring = args.measure is not None
    scored = [item for path in args.rows for item in load_rows(path)] if measuring or not args.from_features else []
    if args.from_features:
        with FEATURES_CSV.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        model = json.loads(AXES_FILE.read_text(encoding="utf-8"))["model"]
    else:
        rows = feature_rows(scored)
        model = scored[0][1].model
    cal = fit(rows, model)
    if not args.no_write:
        atomic_write_text(AXES_FILE, json.dumps(cal.to_dict(), indent=2, sort_keys=True) + "\n")
        if not args.from_features:
            atomic_write_text(FEATURES_CSV, _csv(rows, COLUMNS))
            atomic_write_text(WIDENED_CSV, _csv(widened_rows(scored), WIDENED_COLUMNS))
    sys.stderr.write(json.dumps(cal.to_dict(), indent=2) + "\n")
    if args.measure is not None and scored:
        figures = measure(scored, cal)
        args.measure.parent.mkdir(parents=True, exist_ok=True)
        args.measure.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
