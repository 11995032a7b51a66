"""SMA — Source-aware Membership Audit (Sun et al., arXiv:2508.09105), on the dual-path protocol.

Zero-gradient attribution of the answer to the input units (tokens, words or sentences), computed twice:
with the retrieval switch on (the context is in the prompt) and off (query alone), then compared unit by
unit. The equations, as printed in the paper:

* **Perturbations** (Alg. 1, lines 3–8): N binary masks m⁽ⁱ⁾ ∈ {0,1}^L, each element uniform; a mask that is
  all zeros gets one random element set to 1. A 0 perturbs the unit (character-level Unicode alteration in
  the paper; removal is offered too), a 1 keeps it.
* **Response score** (eq. 14)::

      r⁽ⁱ⁾ = γ₁ · Len(ŷ⁽ⁱ⁾) / Len(·) + γ₂ · Sim(ŷ⁽ⁱ⁾, ·)

  where ŷ⁽ⁱ⁾ is the answer to the i-th perturbed input. Eq. 14 prints the perturbed input x̃⁽ⁱ⁾ as the
  reference of both terms, while §IV-E describes "the output length and its semantic similarity to the
  *original output*". Both readings are available (:attr:`SMASettings.reference`); the default is the
  original answer ŷ (§IV-E; docs/architecture.md, "Method notes"). Len counts the model's tokens; Sim is the cosine of
  all-MiniLM-L6-v2 embeddings (:mod:`core.model.embedder`; the paper lists BLEU, cosine or BERTScore).
* **Ridge attribution** (eqs. 15–16): r = Mβ, β = (MᵀM + αI)⁻¹Mᵀr. Eq. 16 as printed has no intercept.
  Without one, every β_j also carries a share of the mean response (≈ r̄ / (L/2) for uniform masks), so with
  r ≈ 1 every unit of a short query clears any small τ and the first tier labels everything "pretrained".
  We therefore fit an intercept by default (standard LIME practice: β_j is then the change in r from keeping
  unit j); :attr:`SMASettings.fit_intercept` = ``False`` reproduces the printed equation exactly. ADS is
  little affected either way (the shared mean response cancels in β_on − β_off).
* **ADS** (eq. 20): Diff(β_j) = β_RAG(j) − β_w/o RAG(j), for the same perturbed inputs with retrieval on and
  off (eqs. 17–18).
* **Three-way label** (eqs. 19, 21, Alg. 1 lines 15–28): β_j ≥ τ → *pretrained member*; otherwise
  *non-member* when Diff(β_j) lies between τ₂ = −0.1 and τ₁ = 0.1, else *retrieved member*. The paper prints
  the interval as ``τ₁ ≤ Diff < τ₂`` with τ₁ = 0.1 > τ₂ = −0.1, which is empty; we read it as
  ``min(τ₁, τ₂) ≤ Diff < max(τ₁, τ₂)``. The paper does not say whether the first-tier β is the RAG-on or the
  RAG-off attribution, nor give τ, γ₁, γ₂ or α: those are visible settings here (:func:`classify_units`).

How captum is used (:mod:`core.methods.sma.attribution`): ``LLMAttribution`` around ``Lime`` with a ridge
interpretable model (the paper), ``ShapleyValueSampling`` or ``FeatureAblation``, whose forward function
regenerates the answer for every perturbed prompt and returns r⁽ⁱ⁾. Lime draws its masks from our seeded
generator, so the RAG-on and RAG-off runs see the same perturbed query (eqs. 17–18). For Shapley sampling, N
is the number of permutations (1 + N·L generations), drawn from a generator local to the run; feature
ablation needs L + 1.

Scope. In the paper the auditor perturbs the user input and the retrieval module appends its passages
intact. ``scope="query"`` (default) does exactly that. ``scope="query+context"`` also perturbs the context
in the RAG-on run; context units are absent from the RAG-off prompt, so their β_off is 0 by construction and
their ADS is β_on.

The per-prompt summary used as a detector (:data:`DETECTOR_NAME`) is the mean |ADS| over the query units —
the paper's reading of ADS as "how significantly toggling RAG affects the generated outputs, reflecting the
token's dependence on retrieval content" averaged over the input; higher = more retrieval-dependent
(grounded). The paper itself reports accuracy/coverage of recovered retrieval content, not a per-prompt
score; this summary is our choice and is documented as such.

The package, by layer:

* :mod:`~core.methods.sma.units` — units, perturbed forms, masks (pure);
* :mod:`~core.methods.sma.maths` — response score, ADS, three-way labels (pure);
* :mod:`~core.methods.sma.attribution` — the captum wiring;
* :mod:`~core.methods.sma.scorer` — greedy answers to perturbed prompts, scored with eq. 14;
* :mod:`~core.methods.sma.settings`, :mod:`~core.methods.sma.results` — settings and result objects;
* :mod:`~core.methods.sma.run` — :func:`run_sma` and :func:`run_context_ablation`.
"""

from core.methods.sma.attribution import METHOD_LABELS, METHODS, make_attribution, run_captum, seeded_permutations
from core.methods.sma.maths import (
    DEFAULT_TAU,
    DEFAULT_TAU1,
    DEFAULT_TAU2,
    LABELS,
    NON_MEMBER,
    PRETRAINED,
    RETRIEVED,
    ads,
    classify_units,
    mean_abs_ads,
    response_score,
)
from core.methods.sma.results import DETECTOR_NAME, FIRST_TIER, ContextAblation, Sample, SMAResult, SMARun
from core.methods.sma.run import run_context_ablation, run_sma
from core.methods.sma.scorer import ResponseScorer, greedy_answers
from core.methods.sma.settings import REFERENCES, SCOPES, SMASettings
from core.methods.sma.units import (
    CONTEXT,
    GRANULARITIES,
    PERTURBATIONS,
    QUERY,
    Unit,
    baseline_of,
    draw_masks,
    split_units,
    unicode_perturb,
)

__all__ = [
    "CONTEXT",
    "DEFAULT_TAU",
    "DEFAULT_TAU1",
    "DEFAULT_TAU2",
    "DETECTOR_NAME",
    "FIRST_TIER",
    "GRANULARITIES",
    "LABELS",
    "METHODS",
    "METHOD_LABELS",
    "NON_MEMBER",
    "PERTURBATIONS",
    "PRETRAINED",
    "QUERY",
    "REFERENCES",
    "RETRIEVED",
    "SCOPES",
    "ContextAblation",
    "ResponseScorer",
    "SMAResult",
    "SMARun",
    "SMASettings",
    "Sample",
    "Unit",
    "ads",
    "baseline_of",
    "classify_units",
    "draw_masks",
    "greedy_answers",
    "make_attribution",
    "mean_abs_ads",
    "response_score",
    "run_captum",
    "run_context_ablation",
    "run_sma",
    "seeded_permutations",
    "split_units",
    "unicode_perturb",
]
