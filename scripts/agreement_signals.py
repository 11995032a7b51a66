"""Where context and memory agree: do the copying heads or a residual-stream probe tell *read* from *recalled*?

The rows are the validation rows whose context agrees with memory (``assets/validation/rows.csv``, relation
``agreeing``), scored at the app's default settings on the embedded model with the run's recording, each labeled
by its swap test at the span the bundled calibration locates (*read*: the answer follows a swapped context;
*recalled*: it keeps the original). Per row, at the step that generates the span's first token:

* the copying signal (:func:`core.methods.copying.copying_heads`): every head's attention on the span's
  occurrence in the context;
* the residual stream ``h_ℓ`` on the retrieval path and on the parametric path teacher-forced on the same answer
  prefix (their difference per layer is what the probe reads).

Every choice — which heads copy (by AUC on calibration rows), the probe's layer, the resolver's features — is made
on calibration rows by grouped cross-validation (:func:`core.evaluation.headline_fit._grouped_folds`); the report
rows are measured once, beside the headline without a swap test and the rule "always read" that reads no
internals. Outputs: ``out/agreement/rows.jsonl`` and ``out/agreement/h/<key>.npz`` (``score``, resumable),
``assets/validation/agreement_signals.json`` and the chosen copying heads the Attention page marks,
``assets/thresholds/copying-embedded.json`` (``measure``; ``heads`` writes the latter again from the former).

    python scripts/agreement_signals.py score --split calibration [--rows 252]
    python scripts/agreement_signals.py score --split report [--rows 220]
    python scripts/agreement_signals.py measure
    python scripts/agreement_signals.py heads
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
from validate_headline import read_rows  # this folder is the script's first import path

from core.engine.calibration_record import COPYING_HEADS, ChosenHeads
from core.io import asset_path, atomic_write_text
from core.model.loading import EMBEDDED_NAME

OUT = Path("out/agreement")
FIGURES = asset_path("validation") / "agreement_signals.json"
AGREEING = "agreeing"
HEAD_COUNTS = (3, 5, 10, 20)
"""The numbers of copying heads (by calibration AUC) the head count is chosen among."""
PROBE_LAYERS = "every third decoder layer and the last (the embedding row is the same on both paths)"
PCA_DIMS = 8
SEED = 0


def _record(row: Any, result: Any, obs: Any) -> dict[str, Any]:
    from core.engine.axes import feature_values
    from core.engine.axes_calibration import AGREEMENT_FEATURES
    from core.evaluation.headline_fit import row_key

    return {
        "key": row_key(row),
        "split": row.split,
        "construction": row.construction,
        "answer": result.retrieval.answer,
        "span": None if obs.span is None else obs.span.text,
        "in_context": obs.in_context,
        "in_parametric": obs.in_parametric,
        "verdict": result.verdict,  # the headline without a swap test: the internals' own prediction
        "agree_feats": feature_values(obs, AGREEMENT_FEATURES),
        "swap": None,
    }


def _arrays(handle: Any, result: Any, obs: Any) -> dict[str, np.ndarray] | None:
    """The copy maps and both paths' residual stream at the step that generates the span's first token."""
    from core.methods.copying import copying_heads
    from core.methods.internals.replay import prepared_for
    from core.model.trace import trace

    heads = copying_heads(handle, result, obs.span)
    if not heads.available:
        return None
    prefix = [int(i) for i in result.answer_token_ids[: heads.position]]
    prepared = prepared_for(handle, result)
    ret = list(prepared.retrieval.ids) + prefix
    par = list(prepared.parametric.ids) + prefix
    h_ret = result.internals.retrieval.trace(ret, positions=[len(ret) - 1]).residual_array()[0, :, 0, :]
    h_par = trace(handle, [par], positions=[len(par) - 1]).residual_array()[0, :, 0, :]
    return {"copy": heads.copy, "context": heads.context, "h_ret": h_ret, "h_par": h_par}


def score(split: str, n_rows: int, batch: int = 8) -> None:
    """Score the split's agreeing rows (seeded order, the first ``n_rows``), swap-test those whose span is in the
    context and in the no-context answer, append each row to ``out/agreement/rows.jsonl``."""
    from core.engine import DualPathSettings, ScoreRequest, score_batch
    from core.engine.axes import observe
    from core.engine.calibration_record import record_of_result
    from core.engine.swap import run_swap_tests
    from core.evaluation.headline_fit import row_key
    from core.model.loading import load_model

    (OUT / "h").mkdir(parents=True, exist_ok=True)
    path = OUT / "rows.jsonl"
    done = {json.loads(line)["key"] for line in path.open()} if path.exists() else set()
    rows = [r for r in read_rows() if r.relation == AGREEING and r.split == split]
    random.Random(SEED).shuffle(rows)
    todo = [r for r in rows[:n_rows] if row_key(r) not in done]
    handle = load_model(None)
    request = ScoreRequest(settings=DualPathSettings(), free_parametric=True, record=True)
    started = time.perf_counter()
    for start in range(0, len(todo), batch):
        part = todo[start : start + batch]
        results = score_batch(handle, [(r.query, r.context) for r in part], request)
        records, tested = [], []
        for row, result in zip(part, results):
            axes = record_of_result(result).axes
            obs = observe(result, axes.span_level if axes is not None else None)
            rec = _record(row, result, obs)
            arrays = _arrays(handle, result, obs) if obs.span and obs.in_context and obs.in_parametric else None
            if arrays is not None:
                np.savez_compressed(OUT / "h" / f"{rec['key']}.npz", **arrays)
                tested.append((rec, result, obs.span))
            records.append(rec)
            result.internals = None
        tests = run_swap_tests(handle, [t[1] for t in tested], [t[2] for t in tested]) if tested else []
        for (rec, _, _), test in zip(tested, tests):
            rec["swap"] = test.outcome if test.decided else None
        with path.open("a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records)
        print(f"{start + len(part)}/{len(todo)} rows, {time.perf_counter() - started:.0f} s", flush=True)


def _labeled() -> tuple[list[dict], list[dict], dict[str, Any]]:
    from core.evaluation.headline_fit import row_key

    by_key = {row_key(row): row for row in read_rows()}
    recs = [json.loads(line) for line in (OUT / "rows.jsonl").open()]
    lab = [r for r in recs if r["swap"] in ("read", "recalled") and (OUT / "h" / f"{r['key']}.npz").exists()]
    return [r for r in lab if r["split"] == "calibration"], [r for r in lab if r["split"] == "report"], by_key


def _folds(recs: list[dict], by_key: dict[str, Any]) -> list[int]:
    from core.evaluation.headline_fit import Scored, _grouped_folds

    return _grouped_folds([Scored(by_key[r["key"]], None) for r in recs])  # type: ignore[arg-type]


def _matrices(recs: list[dict]) -> dict[str, np.ndarray]:
    from core.engine.axes_calibration import AGREEMENT_FEATURES

    loaded = [np.load(OUT / "h" / f"{r['key']}.npz") for r in recs]
    return {
        "heads": np.asarray(loaded[0]["copy"].shape[1]),
        "y": np.array([r["swap"] == "read" for r in recs]),
        "agree": np.array([[r["agree_feats"][f] for f in AGREEMENT_FEATURES] for r in recs]),
        "copy": np.stack([a["copy"].ravel() for a in loaded]),
        "diff": np.stack([a["h_ret"] - a["h_par"] for a in loaded]),
    }


def _logistic():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=2000))


def _probe():
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(
        StandardScaler(), PCA(PCA_DIMS), LogisticRegression(C=0.1, class_weight="balanced", max_iter=2000)
    )


def _oof(make, X: np.ndarray, y: np.ndarray, folds: list[int]) -> np.ndarray:
    """Out-of-fold P(read) on calibration rows (grouped folds)."""
    p, folds_a = np.zeros(len(y)), np.asarray(folds)
    for k in sorted(set(folds)):
        te = folds_a == k
        p[te] = make().fit(X[~te], y[~te]).predict_proba(X[te])[:, 1]
    return p


def _copy_heads(cal: dict[str, np.ndarray], folds: list[int]) -> tuple[list[int], dict[str, float]]:
    """The copying heads: the ``k`` heads of largest calibration AUC, ``k`` by grouped CV of that choice."""
    from sklearn.metrics import roc_auc_score

    y, X = cal["y"], cal["copy"]
    cv: dict[str, float] = {}
    for k in HEAD_COUNTS:
        score, folds_a = np.zeros(len(y)), np.asarray(folds)
        for f in sorted(set(folds)):
            te = folds_a == f
            auc = [roc_auc_score(y[~te], X[~te, i]) for i in range(X.shape[1])]
            score[te] = X[te][:, np.argsort(auc)[::-1][:k]].mean(1)
        cv[str(k)] = round(float(roc_auc_score(y, score)), 4)
    k = int(max(cv, key=lambda s: (cv[s], -int(s))))
    auc = [roc_auc_score(y, X[:, i]) for i in range(X.shape[1])]
    return [int(i) for i in np.argsort(auc)[::-1][:k]], cv


def measure() -> dict[str, Any]:
    """Every choice on calibration rows, then the report rows once (see the module docstring)."""
    from sklearn.metrics import roc_auc_score

    cal_recs, rep_recs, by_key = _labeled()
    folds = _folds(cal_recs, by_key)
    cal, rep = _matrices(cal_recs), _matrices(rep_recs)
    n_layers, n_heads = cal["diff"].shape[1], int(cal["heads"])
    heads, heads_cv = _copy_heads(cal, folds)
    copy_c, copy_r = (np.log(np.clip(m["copy"][:, heads].mean(1, keepdims=True), 1e-6, None)) for m in (cal, rep))
    layers = sorted({*range(3, n_layers, 3), n_layers - 1})  # layer 0: the same token on both paths
    probe_cv = {str(ell): round(float(roc_auc_score(cal["y"], _oof(_probe, cal["diff"][:, ell], cal["y"], folds))), 4)
                for ell in layers}  # fmt: skip
    layer = int(max(probe_cv, key=lambda s: (probe_cv[s], -int(s))))
    probe_c = _oof(_probe, cal["diff"][:, layer], cal["y"], folds)[:, None]
    probe_r = _probe().fit(cal["diff"][:, layer], cal["y"]).predict_proba(rep["diff"][:, layer])[:, 1][:, None]
    sets = {
        "agreement features (the resolver's today)": (cal["agree"], rep["agree"]),
        "+ copying heads": (np.hstack([cal["agree"], copy_c]), np.hstack([rep["agree"], copy_r])),
        "+ probe": (np.hstack([cal["agree"], probe_c]), np.hstack([rep["agree"], probe_r])),
        "+ both": (np.hstack([cal["agree"], copy_c, probe_c]), np.hstack([rep["agree"], copy_r, probe_r])),
        "copying heads alone": (copy_c, copy_r),
        "probe alone": (probe_c, probe_r),
    }
    table = {}
    for name, (xc, xr) in sets.items():
        p_cv = _oof(_logistic, xc, cal["y"], folds)
        p_rep = _logistic().fit(xc, cal["y"]).predict_proba(xr)[:, 1]
        table[name] = {
            "calibration_cv_auc": round(float(roc_auc_score(cal["y"], p_cv)), 4),
            "calibration_cv_accuracy": round(float(np.mean((p_cv > 0.5) == cal["y"])), 4),
            "report_auc": round(float(roc_auc_score(rep["y"], p_rep)), 4),
            "report_accuracy": round(float(np.mean((p_rep > 0.5) == rep["y"])), 4),
        }
    chosen = max(table, key=lambda s: table[s]["calibration_cv_auc"])
    figures = {
        "model": "embedded (SmolLM2-135M-Instruct)",
        "rows": {s: {"n": len(m["y"]), "read": int(m["y"].sum())} for s, m in (("calibration", cal), ("report", rep))},
        "baselines_on_report": _baselines(rep_recs, rep["y"]),
        "copying_heads": {"chosen": [[i // n_heads, i % n_heads] for i in heads], "cv_auc_by_count": heads_cv},
        "probe": {"layer": layer, "cv_auc_by_layer": probe_cv, "reads": "h_retrieval − h_parametric", "pca": PCA_DIMS},
        "resolver_feature_sets": table,
        "chosen_by_calibration_cv": chosen,
    }
    atomic_write_text(FIGURES, json.dumps(figures, indent=1) + "\n")
    write_heads(figures)
    return figures


def write_heads(figures: dict[str, Any]) -> ChosenHeads:
    """The copying heads of ``figures`` (chosen on calibration rows), as the embedded model's calibration record
    reads them (:data:`core.engine.calibration_record.COPYING_HEADS`): the one writer of that file."""
    heads = tuple((int(a), int(b)) for a, b in figures["copying_heads"]["chosen"])
    cal = figures["rows"]["calibration"]
    chosen = ChosenHeads(
        heads=heads,
        cv_auc=float(figures["copying_heads"]["cv_auc_by_count"][str(len(heads))]),
        rows=int(cal["n"]),
        recalled=int(cal["n"]) - int(cal["read"]),
        chosen_on="the agreeing calibration rows of assets/validation/rows.csv, labeled by their swap tests: the "
        "heads of largest AUC, their count by grouped cross-validation (scripts/agreement_signals.py)",
    )
    atomic_write_text(COPYING_HEADS, json.dumps(chosen.to_dict(EMBEDDED_NAME), indent=1) + "\n")
    return chosen


def _baselines(recs: list[dict], y: np.ndarray) -> dict[str, Any]:
    verdict = np.array([r["verdict"] for r in recs])
    decided = np.isin(verdict, ["read", "recalled"])
    return {
        "headline_without_swap": {
            "accuracy_where_decided": round(float(np.mean((verdict[decided] == "read") == y[decided])), 4),
            "decided": int(decided.sum()),
        },
        "always_read": round(float(y.mean()), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=("score", "measure", "heads"))
    parser.add_argument("--split", choices=("calibration", "report"), default="calibration")
    parser.add_argument("--rows", type=int, default=10_000, help="at most this many agreeing rows of the split")
    args = parser.parse_args(argv)
    if args.stage == "score":
        score(args.split, args.rows)
    elif args.stage == "heads":
        print(json.dumps(write_heads(json.loads(FIGURES.read_text(encoding="utf-8"))).to_dict(EMBEDDED_NAME)))
    else:
        print(json.dumps(measure(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
