"""Extract RADAR's 37 features of the bundled prompt sets for a model, fit the ensemble and report the test accuracy.

For the embedded model (default) the features are written to ``assets/radar/features/embedded.csv`` (+ its
``.json`` metadata), the fitted ensemble as plain arrays to ``assets/radar/ensemble/embedded.npz`` and the
test-set report (with every prompt's token count) to ``assets/radar/ensemble/embedded.json``; all three ship with
the app, so neither the RADAR page nor the ``radar`` detector fits anything. For any other model the features go
to the user cache (``core.io.cache_dir()/radar/<ModelHandle.slug>.csv``), where the page and the detector find
them (and fit once, keeping the ensemble and report in the same cache).
Run it from the repository root (the ``core`` package must be importable):

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/build_radar_assets.py            # embedded → assets/
    HF_HUB_OFFLINE=1 .venv/bin/python scripts/build_radar_assets.py --model HuggingFaceTB/SmolLM2-360M-Instruct

One forward pass per prompt (130 in all); prints the per-category accuracy next to the paper's as markdown.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from core.io import EMBEDDED_SLUG, atomic_write_json
from core.methods import radar
from core.model.loading import load_model


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def report_markdown(report: dict) -> str:
    """The evaluation as a markdown table (ours vs the paper)."""
    lines = [
        (
            "| Category | n | RADAR here (paper's vote rule) | soft vote p̄ > ½ | prompt length only "
            "| Paper (DialoGPT-medium) |"
        ),
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in report["categories"]:
        lines.append(
            f"| {c['title']} | {c['n']} | {_pct(c['accuracy'])} ({c['correct']}/{c['n']}) | "
            f"{_pct(c['soft_accuracy'])} | {_pct(c['length_accuracy'])} | {_pct(c['paper'])} |"
        )
    for key, title in (
        ("overall", "**Overall**"),
        ("recall_tasks", "Recall-labeled"),
        ("reasoning_tasks", "Reasoning-labeled"),
    ):
        r = report[key]
        lines.append(
            f"| {title} | {r['n']} | {_pct(r['accuracy'])} ({r['correct']}/{r['n']}) | {_pct(r['soft_accuracy'])} | "
            f"{_pct(r['length_accuracy'])} | {_pct(r['paper'])} |"
        )
    cv = report["train_cv"]
    lines.append(f"| Training set, 5-fold CV | 30 | {_pct(cv['accuracy'])} | | | {_pct(cv['paper'])} |")
    rds = report["rds_mean"]
    lines.append("")
    lines.append(
        f"Mean RDS on the test set: recall {rds['recall']:.3f}, reasoning {rds['reasoning']:.3f} "
        f"(paper: {rds['paper_recall']:.3f} / {rds['paper_reasoning']:.3f})."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="hub id or local folder (default: the embedded SmolLM2)")
    parser.add_argument("--revision", default=None)
    parser.add_argument("--out", default=None, help="feature CSV to write (default: see above)")
    parser.add_argument("--report", default=None, help="also write the evaluation report as JSON here")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="do not extract: evaluate the features already on disk for this model",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from tqdm import tqdm

    handle = load_model(args.model, revision=args.revision)
    if args.out:
        out = Path(args.out)
    elif handle.slug == EMBEDDED_SLUG:
        out = radar.EMBEDDED_FEATURES_PATH
    else:
        out = radar.feature_cache_path(handle)
    prompts = radar.load_prompt_sets()
    if args.report_only:
        table = radar.read_feature_table(out, prompts)
    else:
        t0 = time.perf_counter()
        with tqdm(total=len(prompts), desc="RADAR features", unit="prompt", file=sys.stderr) as bar:
            table = radar.extract_feature_table(handle, prompts, progress=lambda done, total: bar.update(1))
        elapsed = time.perf_counter() - t0
        table.meta["extraction_seconds"] = round(elapsed, 1)
        radar.save_feature_table(table, out)
        sys.stderr.write(f"{len(prompts)} prompts in {elapsed:.1f} s → {out}\n")
    counts = radar.prompt_token_counts(handle, prompts)
    report = {**radar.evaluate_table(table, token_counts=counts), "token_counts": counts}
    if handle.slug == EMBEDDED_SLUG and not args.out:
        digest, model = radar.table_digest(table), str(table.meta.get("model"))
        clf = radar.RadarClassifier.from_table(table)
        radar.save_classifier(clf, radar.EMBEDDED_ENSEMBLE_PATH, digest=digest, model=model)
        atomic_write_json(radar.EMBEDDED_REPORT_PATH, radar.report_document(table, report))
        sys.stderr.write(f"ensemble → {radar.EMBEDDED_ENSEMBLE_PATH}, report → {radar.EMBEDDED_REPORT_PATH}\n")
    if args.report:
        atomic_write_json(args.report, report)
    sys.stdout.write(f"Model: {handle.info.name}\n\n{report_markdown(report)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
