"""``python -m core probe`` and ``python -m core crm-basis``: the model's internals from the command line.

``probe`` runs the dual path, then one instrumented forward per path (hidden states, attention reduced on the
fly, logit lens) and, when a CRM basis exists for the model and template, the latent trajectory shift.
With ``--json`` it prints the :class:`~core.engine.result.DualPathResult` JSON (every key of ``run --json``) with
two blocks added under ``extras``:

* ``extras.internals`` — per layer (index 0 = embeddings, ℓ + 1 = decoder layer ℓ) the L2 norm ‖d_ℓ‖ and the
  logit-lens KL at the last prompt token and averaged over the answer, the logit-lens top-1 of both paths,
  and per path the attention-entropy maps (layers × heads), specialized-head counts at τ, RADAR's D.2.1
  features and the attention mass on template/context/query/answer tokens;
* ``extras.crm`` — LTS along PC1 and along the supervised direction, the layers flagged by the μ ± 2σ rule,
  the kept layers, the anomaly score, the CRM-LR probability and the cross-validated classifier report
  (AUC with bootstrap 95 % CI on the bundled calibration prompts); or ``{"available": false, "reason": …}``.

``crm-basis`` computes (and caches on disk) the CRM basis of a model from the bundled calibration prompts.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from core.cli.common import add_model_args, load_handle, settings_from_args, threshold_from_args
from core.engine import run_dual_path
from core.methods.crm import PC1, SUPERVISED, CrmBasis, cache_basis_path, compute_basis, crm_report, load_basis
from core.methods.internals import RADAR_TAU, analyze
from core.model.handle import ModelHandle
from core.model.progress import Progress


def register(subparsers: argparse._SubParsersAction) -> None:
    probe = subparsers.add_parser(
        "probe", help="one analysis with the model's internals (CRM trajectory, logit lens, attention)"
    )
    probe.add_argument("--query", required=True)
    probe.add_argument("--context", required=True)
    probe.add_argument("--json", action="store_true", help="print the result JSON with extras.internals and extras.crm")
    probe.add_argument(
        "--tau",
        type=float,
        default=RADAR_TAU,
        help="attention-entropy threshold of a specialized head (nats, default 1.5)",
    )
    probe.add_argument("--lens-top-k", type=int, default=5, help="logit-lens candidates kept per layer (default 5)")
    probe.add_argument(
        "--compute-basis", action="store_true", help="compute the CRM basis first if this model has none"
    )
    add_model_args(probe)
    probe.set_defaults(func=_cmd_probe, max_new_tokens=32)

    basis = subparsers.add_parser(
        "crm-basis", help="compute and cache the CRM basis of a model (bundled calibration prompts)"
    )
    basis.add_argument("--force", action="store_true", help="recompute even when a basis exists")
    add_model_args(basis)
    basis.set_defaults(func=_cmd_basis)


def _progress(label: str) -> Progress:
    def report(done: int, total: int, _text: str = "") -> None:
        sys.stderr.write(f"\r{label}: {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return report


def _basis_for(handle: ModelHandle, template: str, compute: bool) -> tuple[CrmBasis | None, str]:
    basis = load_basis(handle, template)
    if basis is not None:
        return basis, ""
    if compute:
        return compute_basis(handle, progress=_progress("CRM calibration prompts"), template=template), ""
    return None, (
        f"no CRM basis for {handle.info.name!r} with template {template!r}; run `python -m core crm-basis` "
        "(or pass --compute-basis)"
    )


def _cmd_probe(args: argparse.Namespace) -> int:
    if args.lens_top_k < 1:
        raise ValueError(f"--lens-top-k must be at least 1, got {args.lens_top_k}")
    if not 0.0 < args.tau < float("inf"):
        raise ValueError(f"--tau must be a positive number of nats, got {args.tau}")
    settings = settings_from_args(args)
    threshold, source = threshold_from_args(args)
    handle = load_handle(args)
    result = run_dual_path(handle, args.query, args.context, settings, threshold=threshold, threshold_source=source)
    internals = analyze(handle, result, top_k=args.lens_top_k)
    basis, reason = _basis_for(handle, result.template, args.compute_basis)
    result.extras["internals"] = internals.summary(tau=args.tau)
    result.extras["crm"] = crm_report(basis, internals.displacement, reason)
    if args.json:
        sys.stdout.write(result.to_json() + "\n")
        return 0
    sys.stdout.write(_table(result.extras, result) + "\n")
    return 0


def _fmt(value: Any, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _table(extras: dict[str, Any], result: Any) -> str:
    internals, block = extras["internals"], extras["crm"]
    lines = [
        f"model:       {result.model}",
        f"retrieval:   {result.retrieval.answer}",
        f"parametric:  {result.parametric.answer}",
        f"Z (T={result.score_window}): {result.repcs_score:.4f} nats   RePCS verdict: {result.repcs_verdict}",
    ]
    if block.get("available"):
        cls = block["classifier"]["feature_sets"]
        lines.append(
            f"CRM-LR P(memorized) = {block['lr_probability_memorized']:.3f}   crm_lts = {block['crm_lts_score']:.3f}   "
            f"calibration AUC (PC1, kept layers) = {cls['pc1']['auc']:.3f} "
            f"[{cls['pc1']['ci95'][0]:.3f}, {cls['pc1']['ci95'][1]:.3f}]"
        )
        lines.append("layer   kept  LTS_pc1  (μ ± 2σ)              flag  LTS_sup  flag   ‖d‖      lens KL")
        kept = set(block["kept_layers"])
        for row in range(len(block[PC1]["lts"])):
            mu, sd = block[PC1]["mu"][row], block[PC1]["sigma"][row]
            name = "emb" if row == 0 else str(row - 1)
            flag_pc1 = "!" if row in block[PC1]["flagged_layers"] else " "
            flag_sup = "!" if row in block[SUPERVISED]["flagged_layers"] else " "
            lines.append(
                f"{name:>5}   {'*' if row in kept else ' '}   {block[PC1]['lts'][row]:8.3f}  "
                f"({mu - 2 * sd:8.3f}, {mu + 2 * sd:8.3f})  {flag_pc1}   "
                f"{block[SUPERVISED]['lts'][row]:8.3f}  {flag_sup}    "
                f"{internals['l2_norm'][row]:8.3f}  {internals['logit_lens_kl'][row]:8.4f}"
            )
    else:
        lines.append(f"CRM: {block['reason']}")
        lines.append("layer   ‖d‖      lens KL")
        for row, (norm, kl) in enumerate(zip(internals["l2_norm"], internals["logit_lens_kl"], strict=True)):
            lines.append(f"{'emb' if row == 0 else row - 1:>5}  {norm:8.3f}  {kl:8.4f}")
    attn = internals["attention"]
    rag, para = attn["retrieval"]["specialized_heads_first"], attn["parametric"]["specialized_heads_first"]
    lines.append(
        f"specialized heads (entropy < τ = {attn['tau']}) at the first answer step: retrieval {rag}, parametric {para}"
    )
    return "\n".join(lines)


def _cmd_basis(args: argparse.Namespace) -> int:
    handle = load_handle(args)
    existing = load_basis(handle, args.template)
    if existing is not None and not args.force:
        sys.stderr.write(
            f"A CRM basis already exists for {handle.info.name} ({existing.template}); use --force to recompute.\n"
        )
        basis = existing
    else:
        basis = compute_basis(handle, progress=_progress("CRM calibration prompts"), template=args.template)
        sys.stderr.write(f"saved to {cache_basis_path(handle, basis.template)}\n")
    layers = ", ".join("emb" if r == 0 else str(r - 1) for r in basis.kept_layers) or "none"
    sys.stderr.write(f"kept decoder layers (variance ratio > {basis.evr_threshold}): {layers}\n")
    for name, m in basis.classifier.get("feature_sets", {}).items():
        sys.stderr.write(f"{name:22s} AUC={m['auc']:.3f}  95% CI [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]\n")
    return 0
