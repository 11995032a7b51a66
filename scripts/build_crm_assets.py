"""Precompute the CRM basis of the embedded model and write it to ``assets/crm/`` (CRM §2, §4.5, app. P, V).

For every prompt of ``assets/crm/calibration_prompts.json`` (60 memorized-style + 60 grounded) the embedded
SmolLM2 runs one forward pass on the retrieval prompt and one on the parametric prompt; the displacement
d_ℓ at the last prompt token gives, per layer, the PC1 and supervised directions, the variance ratios, the
calibration μ/σ of LTS for the audit rule, the L2-norm and logit-lens-KL baselines, and the cross-validated
logistic regression (stratified 5-fold, seed 42, bootstrap 95 % CI). Writes

* ``assets/crm/embedded-<template>.npz`` — float32 arrays + a JSON metadata string (``allow_pickle=False``);
* ``assets/crm/embedded-<template>.summary.json`` — the human-readable facts (kept layers, AUCs …).

Re-running reproduces the files (fp32 on CPU; the classifier and bootstrap are seeded). Float summation
order can differ across CPU thread counts in the last bits, so use ``--threads 1`` for bit-identical output.

    python scripts/build_crm_assets.py [--template auto] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import torch
from tqdm import tqdm

from core.io import atomic_write_text
from core.methods.crm import (
    CALIBRATION_PROMPTS,
    DEFAULT_LAYER_RULE,
    LAYER_RULES,
    bundled_basis_path,
    compute_basis,
    load_calibration_prompts,
)
from core.model.loading import load_model
from core.model.prompts import TEMPLATE_CHOICES


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default="auto", choices=TEMPLATE_CHOICES)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 = bit-reproducible)")
    parser.add_argument(
        "--layer-rule",
        default=DEFAULT_LAYER_RULE,
        choices=LAYER_RULES,
        help="layer selection: the paper's within-layer PCA ratio (default) or the share of the total variance",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(max(1, args.threads))

    handle = load_model()
    n = len(load_calibration_prompts(CALIBRATION_PROMPTS))
    start = time.perf_counter()
    with tqdm(total=n, desc="calibration prompts", unit="prompt", file=sys.stderr) as bar:
        basis = compute_basis(
            handle,
            progress=lambda done, total: bar.update(1),
            template=args.template,
            save=False,
            layer_rule=args.layer_rule,
        )
    elapsed = time.perf_counter() - start
    out = basis.save(bundled_basis_path(basis.template))
    summary = basis.describe()
    summary["build_seconds"] = round(elapsed, 1)
    summary_path = out.with_name(out.stem + ".summary.json")
    atomic_write_text(summary_path, json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    sets = basis.classifier["feature_sets"]
    sys.stderr.write(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB) and {summary_path.name} in {elapsed:.0f} s\n")
    layers = ", ".join("emb" if r == 0 else str(r - 1) for r in basis.kept_layers) or "none"
    sys.stderr.write(f"kept decoder layers ({basis.layer_rule} variance ratio > {basis.evr_threshold}): {layers}\n")
    for name, m in sets.items():
        sys.stderr.write(f"{name:14s} AUC={m['auc']:.3f}  95% CI [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
