"""Score a labeled set once for the combined detector and the two lenses: every row's base combined features,
its ReDeEP means (every head's mean ECS, the chosen layers' mean PKS) and its Lookback Lens span features (every
head's mean lookback ratio), so that the refit combined detector, any ReDeEP choice of heads and the Lookback
classifier are measured afterwards without the model (``--report``).

Rows go to ``out/redeep/sets/<name>.jsonl`` (resumable; ``out/`` is untracked). A row may have several records:
later ones add the parts (``base``, ``redeep``, ``lookback``) earlier runs did not compute, so each row is
generated once per missing part and never again. Settings as the combined detector's training rows (T = max new
tokens = 64, template auto, greedy, fp32 CPU, one thread).

    python scripts/score_redeep_sets.py assets/sets/shift_paraphrase/shift_paraphrase.csv [--limit 120]
    python scripts/score_redeep_sets.py assets/behavior/behavior.csv --split report --limit 300
    python scripts/score_redeep_sets.py assets/calibration/clean.csv --label grounded --parts lookback \\
        --out-dir out/redeep/calibration    # the combined detector's training rows (scripts/build_combined.py)
    python scripts/score_redeep_sets.py assets/sets/x/x.csv --merge out/lookback/eval_x.json  # no model
    python scripts/score_redeep_sets.py --report [--before a7bfee5,ac33396]   # AUC [95% CI] per set, no model
    python scripts/score_redeep_sets.py --why shift_topic_matched   # which rows and features the combined misranks

``--merge REPORT`` copies what an ``evaluate`` report stored for the set's rows (same settings; matched by query
and context): the per-head means of ``lookback_cv`` and the retrieval answer, so those rows need no second pass.

The report scores each set's rows with the bundled ReDeEP choice (``redeep``, ``redeep_ecs``, ``redeep_pks``),
the bundled Lookback classifier and ``lookback_mean``, the combined detector as committed at each ``--before``
revision (``git show REV:assets/combined/embedded-chat.json``; default a7bfee5, before the lenses' features,
and ac33396, with ReDeEP's) and the bundled combined detector now, on the rows that have every part; positive
class = memorized/recalled (for the behavior set: what the model's 64-token answer named, as ``evaluate``
decides it, with the conflict rows as a second column); bootstrap CIs as ``evaluate`` reports them (1,000
resamples, seed 42).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from _common import add_threads_arg, read_csv, set_threads

from core.io import REPO_ROOT

BASE = ("z", "kl_mean", "kl_max", "kl_var", "kl_trend", "crm_lts", "log_ppl", "zlib", "min_k_20", "min_kpp_20", "radar")
"""The combined detector's features before the lenses (the order of its stored feature table)."""
PARTS = ("base", "redeep", "lookback")
OUT = REPO_ROOT / "out" / "redeep" / "sets"
BEHAVIOR_COLUMNS = ("kind", "answer_context", "answer_memory")


def label_of(row: dict[str, str]) -> int | None:
    """1 = memorized / recalled, 0 = grounded / read, ``None`` = left out."""
    value = (row.get("behavior") or row.get("label") or "").strip()
    return {"memorized": 1, "recalled": 1, "grounded": 0, "read": 0}.get(value)


def load_rows(path: Path) -> dict[int, dict[str, Any]]:
    """A set's stored rows by row number, later records adding to earlier ones."""
    rows: dict[int, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            rows.setdefault(int(rec["row"]), {}).update(rec)
    return rows


def has_part(rec: dict[str, Any], part: str) -> bool:
    """Whether a stored row has ``part`` (or its recorded reason why it cannot)."""
    key = {"base": "base", "redeep": "ecs", "lookback": "lookback"}[part]
    return key in rec or f"{part}_error" in rec


def append(path: Path, records: Iterable[dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")


def selected_rows(args: argparse.Namespace) -> tuple[list[tuple[int, dict[str, str]]], Path]:
    """The set's ``(row number, row)`` pairs that ``args`` select, and the file their records go to."""
    rows = [(i + 1, r) for i, r in enumerate(read_csv(args.csv))]
    if args.split:
        rows = [(i, r) for i, r in rows if r.get("split") == args.split]
    if args.label:
        rows = [(i, {**r, "label": args.label}) for i, r in rows]
    rows = [(i, r) for i, r in rows if label_of(r) is not None][: args.limit]
    name = args.csv.stem + (f"-{args.split}" if args.split else "")
    return rows, args.out_dir / f"{name}.jsonl"


def merge_report(args: argparse.Namespace) -> int:
    """Add what an ``evaluate`` report stored for the set's rows (same settings; matched by query and context):
    the ``lookback_cv`` features and the retrieval answer, where a row's records lack them. Returns the rows
    changed."""
    rows, out = selected_rows(args)
    by_text = {(r["query"], r["context"]): i for i, r in rows}
    done = load_rows(out)
    added = []
    for r in json.loads(args.merge.read_text(encoding="utf-8"))["rows"]:
        i = by_text.get((r["query"], r["context"]))
        if i is None or i not in done:
            continue
        rec: dict[str, Any] = {}
        if "lookback_cv" in r.get("features", {}) and not has_part(done[i], "lookback"):
            rec["lookback"] = [float(v) for v in r["features"]["lookback_cv"]]
        if "answer" not in done[i] and r.get("rag_answer") is not None:
            rec["answer"] = r["rag_answer"]
        row = dict(rows)[i]
        rec.update({c: row[c] for c in BEHAVIOR_COLUMNS if c in row and c not in done[i]})
        if rec:
            added.append({"row": i, **rec})
    append(out, added)
    return len(added)


def _score_parts(handle: Any, results: list[Any], settings: Any, parts: list[str]) -> list[dict[str, Any]]:
    """The requested parts of each scored row (a part that fails records its reason as ``<part>_error``)."""
    from core.detectors.combined import DEFAULT_T, raw_features
    from core.detectors.registry import DetectorInput
    from core.methods.lookback import lookback_map, span_features
    from core.methods.redeep import ReDeEPChoice, redeep_trace, row_means
    from core.methods.redeep.choice import bundled_choice_path

    layers = ReDeEPChoice.load(bundled_choice_path("chat")).layers
    out = []
    for res in results:
        rec: dict[str, Any] = {"n_tokens": len(res.answer_token_ids), "answer": res.retrieval.answer}
        for part in parts:
            try:
                if part == "base":
                    x = raw_features(DetectorInput(handle, res, settings), BASE, DEFAULT_T)
                    rec["base"] = dict(zip(BASE, (float(v) for v in x)))
                elif part == "redeep":
                    ecs, pks = row_means(redeep_trace(handle, res, layers=layers))
                    rec["ecs"] = ecs.tolist()
                    rec["pks"] = None if pks is None else [None if v != v else float(v) for v in pks]
                else:
                    rec["lookback"] = span_features(lookback_map(handle, res).lr).tolist()
            except ValueError as exc:
                rec[f"{part}_error"] = str(exc)
        out.append(rec)
    return out


def score_set(args: argparse.Namespace) -> None:
    """Score the set's rows that lack a requested part (``--limit`` first labeled rows), ``--batch-size`` at a time."""
    from tqdm import tqdm

    from core.detectors.combined import DEFAULT_T
    from core.engine import DualPathSettings
    from core.engine.batch import score_batch
    from core.model.loading import load_model

    rows, out = selected_rows(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = load_rows(out)
    todo = [(i, r, [p for p in args.parts if not has_part(done.get(i, {}), p)]) for i, r in rows]
    todo = [t for t in todo if t[2]][:: -1 if args.reverse else 1]
    handle = load_model(device="cpu")
    settings = DualPathSettings(max_new_tokens=DEFAULT_T, score_window=DEFAULT_T, template="auto")
    with tqdm(total=len(rows), initial=len(rows) - len(todo), desc=out.stem, file=sys.stderr) as bar:
        for start in range(0, len(todo), args.batch_size):
            chunk = todo[start : start + args.batch_size]
            results = score_batch(handle, [(r["query"], r["context"]) for _, r, _ in chunk], settings)
            records = []
            for (i, r, parts), res in zip(chunk, results):
                rec = {"row": i, "label": label_of(r), **{c: r[c] for c in BEHAVIOR_COLUMNS if c in r}}
                records.append({**rec, **_score_parts(handle, [res], settings, parts)[0]})
            append(out, records)
            bar.update(len(chunk))


def _by_label(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    return rows, [int(r["label"]) for r in rows]


def labeled(name: str, rows: dict[int, dict[str, Any]]) -> dict[str, tuple[list[dict[str, Any]], list[int]]]:
    """A set's columns of the report: ``{column: (rows, labels)}``. The behavior set is labeled by what the
    stored 64-token answer named (``evaluate``'s rule; undecided rows left out), in two columns: every row and the
    conflict rows; the unscreened set in two columns too (every row, and those whose label the model's behavior
    confirms); any other set by its own label."""
    if name == "unscreened":  # and its behavior-confirmed rows (parametric_correct), as the README's table
        from core.evaluation.data import label_confirmed

        csv_rows = read_csv(REPO_ROOT / "assets" / "sets" / name / f"{name}.csv")
        ok = [r for i, r in rows.items() if label_confirmed(csv_rows[i - 1]["label"], csv_rows[i - 1])]
        return {name: _by_label(list(rows.values())), f"{name} (confirmed)": _by_label(ok)}
    if not name.startswith("behavior"):
        return {name: _by_label(list(rows.values()))}
    from core.evaluation.behavior import RECALLED, behavior_label, in_subset

    out: dict[str, tuple[list[dict[str, Any]], list[int]]] = {}
    for subset in ("conflict", "all"):
        kept, y = [], []
        for r in rows.values():
            label, _ = behavior_label(r.get("answer", ""), r.get("answer_context"), r.get("answer_memory"))
            if label is not None and "answer" in r and in_subset(r.get("kind") or "project_conflict", subset):
                kept.append(r)
                y.append(int(label == RECALLED))
        out[f"{name}: {subset}"] = (kept, y)
    return out


def row_scores(rec: dict[str, Any], lenses: dict[str, Any]) -> dict[str, float]:
    """Every reported score of one complete row (higher = memorized / recalled)."""
    import numpy as np

    choice, classifier = lenses["choice"], lenses["lookback"]
    ecs, pks = np.asarray(rec["ecs"]), np.asarray(rec["pks"], dtype=np.float64)
    e = float(ecs[[h[0] for h in choice.heads], [h[1] for h in choice.heads]].mean())
    p = float(pks[choice.layers].mean())
    x = np.asarray(rec["lookback"], dtype=np.float64)
    feats = {**rec["base"], "redeep_ecs": e, "redeep_pks": p}
    feats.update(lookback=classifier.probability(x), lookback_mean=float(x.mean()))
    out = {"redeep": float(choice.score(ecs, pks)), "redeep_ecs": -e, "redeep_pks": p}
    out.update(lookback=feats["lookback"], lookback_mean=-feats["lookback_mean"])  # higher mean ratio = read
    for name, model in lenses["combined"].items():
        out[name] = model.probability(np.asarray([feats[f] for f in model.features], dtype=np.float64))
    return out


def report(out_dir: Path, before: list[str]) -> None:
    """Print one Markdown table: AUC [95% CI] per detector and scored set, on the rows with every part."""
    import subprocess

    import numpy as np

    from core.detectors.combined import CombinedModel, bundled_model_path
    from core.maths.metrics import auc, auc_bootstrap_ci
    from core.methods.lookback import LookbackModel
    from core.methods.lookback import bundled_model_path as lookback_path
    from core.methods.redeep import ReDeEPChoice
    from core.methods.redeep.choice import bundled_choice_path

    combined = {
        f"combined@{rev}": CombinedModel.from_dict(
            json.loads(
                subprocess.run(
                    ["git", "show", f"{rev}:assets/combined/embedded-chat.json"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
        )
        for rev in before
    }
    combined["combined (now)"] = CombinedModel.load(bundled_model_path("chat"))
    lenses = {
        "choice": ReDeEPChoice.load(bundled_choice_path("chat")),
        "lookback": LookbackModel.load(lookback_path("chat")),
        "combined": combined,
    }
    columns: dict[str, dict[str, str]] = {}
    for path in sorted(out_dir.glob("*.jsonl")):
        rows = {i: r for i, r in load_rows(path).items() if all(k in r for k in ("base", "ecs", "lookback"))}
        for column, (recs, y) in labeled(path.stem, rows).items():
            scores = [row_scores(r, lenses) for r in recs]
            cells = {}
            for det in scores[0] if scores else ():
                v = np.asarray([s[det] for s in scores])
                low, high = auc_bootstrap_ci(np.asarray(y), v, n_boot=1000, seed=42)
                cells[det] = f"{auc(np.asarray(y), v):.3f} [{low:.2f}, {high:.2f}]"
            columns[f"{column} (n={len(y)}, {sum(y)} pos.)"] = cells
    names = [n for n in columns if columns[n]]
    print("| detector | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for det in columns[names[0]]:
        print(f"| {det} | " + " | ".join(columns[n][det] for n in names) + " |")
    print(f"\nReDeEP choice: {lenses['choice'].describe()}")
    print("combined features: " + "; ".join(f"{k}: {len(m.features)}" for k, m in combined.items()))


def why(out_dir: Path, name: str, top: int = 8) -> None:
    """Why the bundled combined detector misranks a set: each of its features' own AUC on the set (diagnosis
    only, never used to choose features), the mean standardized contribution per class, and the worst-ranked rows
    of each class with their largest contributions."""
    import numpy as np

    from core.detectors.combined import CombinedModel, bundled_model_path
    from core.maths.metrics import auc
    from core.methods.lookback import LookbackModel
    from core.methods.lookback import bundled_model_path as lookback_path
    from core.methods.redeep import ReDeEPChoice
    from core.methods.redeep.choice import bundled_choice_path

    model = CombinedModel.load(bundled_model_path("chat"))
    lenses = {
        "choice": ReDeEPChoice.load(bundled_choice_path("chat")),
        "lookback": LookbackModel.load(lookback_path("chat")),
        "combined": {},
    }
    stem = name.split(":")[0]  # a set, or a column of one ("behavior-report: conflict")
    rows = {
        i: r
        for i, r in load_rows(out_dir / f"{stem}.jsonl").items()
        if all(k in r for k in ("base", "ecs", "lookback"))
    }
    recs, y = labeled(stem, rows)[name]
    feats = []
    for r in recs:
        s = row_scores(r, lenses)
        f = {**r["base"], "redeep_ecs": -s["redeep_ecs"], "redeep_pks": s["redeep_pks"]}
        feats.append({**f, "lookback": s["lookback"], "lookback_mean": -s["lookback_mean"]})
    X = np.array([[f[k] for k in model.features] for f in feats])
    labels = np.asarray(y)
    contrib = np.asarray(model.coef) * (X - np.asarray(model.mean)) / np.asarray(model.scale)
    p = np.asarray([model.probability(x) for x in X])
    print(f"{name}: n={len(y)}, AUC of the bundled combined {auc(labels, p):.3f}")
    print("| feature | coef | its own AUC, in the sign of its coef | mean contribution, memorized | grounded |")
    print("|---|---|---|---|---|")
    for j, f in enumerate(model.features):
        a = auc(labels, X[:, j] * np.sign(model.coef[j] or 1.0))
        c1, c0 = contrib[labels == 1, j].mean(), contrib[labels == 0, j].mean()
        print(f"| {f} | {model.coef[j]:+.2f} | {a:.3f} | {c1:+.2f} | {c0:+.2f} |")
    for cls, order in ((1, np.argsort(p)), (0, np.argsort(-p))):
        print(f"\nlowest-ranked {'memorized' if cls else 'grounded'} rows (P, largest contributions):")
        for k in [k for k in order if labels[k] == cls][:top]:
            big = sorted(zip(model.features, contrib[k]), key=lambda t: -abs(t[1]))[:4]
            print(f"  row {recs[k]['row']}: P={p[k]:.3f}  " + ", ".join(f"{f} {c:+.2f}" for f, c in big))


def main() -> int:
    if "--why" in sys.argv:
        why(OUT, sys.argv[sys.argv.index("--why") + 1])
        return 0
    if "--report" in sys.argv:
        at = sys.argv.index("--before") + 1 if "--before" in sys.argv else None
        report(OUT, (sys.argv[at] if at else "a7bfee5,ac33396").split(","))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--split", default=None, help="keep rows whose split column is this")
    parser.add_argument("--label", default=None, help="give every row this label (a CSV without a label column)")
    parser.add_argument("--limit", type=int, default=120, help="at most this many rows (first rows, default 120)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"what to compute (default {','.join(PARTS)})")
    parser.add_argument("--out-dir", type=Path, default=OUT, help="where the rows go (default out/redeep/sets)")
    parser.add_argument("--merge", type=Path, default=None, help="add an evaluate report's stored rows (no model)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--reverse", action="store_true", help="last rows first (a second process on the same set)")
    add_threads_arg(parser)
    args = parser.parse_args()
    args.parts = [p for p in args.parts.split(",") if p]
    if not set(args.parts) <= set(PARTS):
        parser.error(f"--parts takes {', '.join(PARTS)}")
    logging.basicConfig(level=logging.WARNING)
    set_threads(args.threads)
    if args.merge:
        sys.stderr.write(f"added to {merge_report(args)} rows\n")
    else:
        score_set(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
