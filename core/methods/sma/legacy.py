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
  original answer ŷ (§IV-E, and DESIGN.md §5). Len counts the model's tokens; Sim is the cosine of
  all-MiniLM-L6-v2 embeddings (:mod:`core.embedder`; the paper lists BLEU, cosine or BERTScore).
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
  RAG-off attribution, nor give τ, γ₁, γ₂ or α: those are visible settings here
  (:func:`classify_units`).

How captum is used. ``captum.attr.LLMAttribution`` wraps a perturbation method (``Lime``,
``ShapleyValueSampling`` or ``FeatureAblation``) and a ``TextTemplateInput`` whose features are the units:
a 0 in the interpretable mask replaces the unit by its baseline (its perturbed form). Out of the box
LLMAttribution attributes log p(fixed target | perturbed prompt); SMA instead regenerates the answer for
every perturbed prompt and scores it with eq. 14. We therefore subclass ``LLMAttribution`` and replace only
its forward function (:func:`make_attribution`): captum still maps masks to prompts, drives the
sampling loop, and (for Lime) fits ``SkLearnRidge`` — with a constant similarity kernel, so the fit is the
unweighted ridge of eq. 16 — while our forward generates greedily and returns r⁽ⁱ⁾. Lime draws its masks
from our generator, so the RAG-on and RAG-off runs see the same perturbed query (eqs. 17–18). For Shapley
sampling, N is the number of permutations (1 + N·L generations); feature ablation needs L + 1.

Scope. In the paper the auditor perturbs the user input and the retrieval module appends its passages
intact. ``scope="query"`` (default) does exactly that. ``scope="query+context"`` also perturbs the context
in the RAG-on run; context units are absent from the RAG-off prompt, so their β_off is 0 by construction and
their ADS is β_on.

The per-prompt summary used as a detector (:data:`DETECTOR_NAME`) is the mean |ADS| over the query units —
the paper's reading of ADS as "how significantly toggling RAG affects the generated outputs, reflecting the
token's dependence on retrieval content" averaged over the input; higher = more retrieval-dependent
(grounded). The paper itself reports accuracy/coverage of recovered retrieval content, not a per-prompt
score; this summary is our choice and is documented as such.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from core.model.embedder import embed
from core.engine.dual_path import DualPathSettings, generate_greedy
from core.model.loading import ModelHandle
from core.model.prompts import TEMPLATE_CHOICES, build_prompt, clean_text, encode_prompt, resolve_template

logger = logging.getLogger(__name__)

GRANULARITIES = ("token", "word", "sentence")
METHODS = ("lime", "shapley", "ablation")
METHOD_LABELS = {
    "lime": "Lime + ridge (the paper: random masks, eq. 16)",
    "shapley": "Shapley value sampling (N permutations)",
    "ablation": "Feature ablation (one unit at a time)",
}
PERTURBATIONS = ("unicode", "remove")
SCOPES = ("query", "query+context")
REFERENCES = ("answer", "input")
FIRST_TIER = ("off", "on")

PRETRAINED = "pretrained member"
RETRIEVED = "retrieved member"
NON_MEMBER = "non-member"
LABELS = (PRETRAINED, RETRIEVED, NON_MEMBER)

QUERY = "query"
CONTEXT = "context"

DEFAULT_TAU = 0.1
DEFAULT_TAU1 = 0.1
DEFAULT_TAU2 = -0.1
DETECTOR_NAME = "sma"


# ----------------------------------------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class SMASettings:
    """User-visible settings of an SMA run.

    Attributes:
        n_samples: N — random masks (Lime) or permutations (Shapley sampling); unused by feature ablation.
        granularity: ``"token"`` (the model's tokens), ``"word"`` (whitespace-separated) or ``"sentence"``.
        method: ``"lime"`` (the paper), ``"shapley"`` or ``"ablation"``.
        perturbation: ``"unicode"`` (every letter/digit of a masked unit replaced by a Unicode look-alike, the
            paper's character-level alteration) or ``"remove"`` (the unit is deleted).
        scope: ``"query"`` (the paper: only the user input is perturbed) or ``"query+context"``.
        gamma_length, gamma_similarity: γ₁ and γ₂ of eq. 14 (the paper gives no values).
        alpha: the ridge coefficient α of eq. 16.
        fit_intercept: add an (unpenalised) intercept to the ridge fit; ``False`` = eq. 16 as printed.
        reference: ``"answer"`` — Len and Sim against the unperturbed answer ŷ (§IV-E) — or ``"input"`` —
            against the perturbed input text x̃⁽ⁱ⁾ (eq. 14 as printed).
        max_new_tokens: most tokens of every (perturbed) answer.
        template: prompt template key (as in :class:`core.engine.DualPathSettings`).
        seed: seed of the masks (Lime) and permutations (Shapley).
        batch_size: perturbed prompts generated together (left-padded batch).
    """

    n_samples: int = 64
    granularity: str = "word"
    method: str = "lime"
    perturbation: str = "unicode"
    scope: str = "query"
    gamma_length: float = 0.5
    gamma_similarity: float = 0.5
    alpha: float = 1.0
    fit_intercept: bool = True
    reference: str = "answer"
    max_new_tokens: int = 32
    template: str = "auto"
    seed: int = 0
    batch_size: int = 8

    def validate(self) -> None:
        if not 1 <= self.n_samples <= 4096:
            raise ValueError(f"n_samples must be between 1 and 4096, got {self.n_samples}")
        for name, value, allowed in (
            ("granularity", self.granularity, GRANULARITIES),
            ("method", self.method, METHODS),
            ("perturbation", self.perturbation, PERTURBATIONS),
            ("scope", self.scope, SCOPES),
            ("reference", self.reference, REFERENCES),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.template not in TEMPLATE_CHOICES:
            raise ValueError(f"Unknown template {self.template!r}; choose one of {', '.join(TEMPLATE_CHOICES)}")
        if self.alpha <= 0:
            raise ValueError(f"the ridge coefficient alpha must be > 0 (eq. 16), got {self.alpha}")
        if not 1 <= self.max_new_tokens <= 1024:
            raise ValueError(f"max_new_tokens must be between 1 and 1024, got {self.max_new_tokens}")
        if not 1 <= self.batch_size <= 256:
            raise ValueError(f"batch_size must be between 1 and 256, got {self.batch_size}")
        if not (np.isfinite(self.gamma_length) and np.isfinite(self.gamma_similarity)):
            raise ValueError("gamma_length and gamma_similarity must be finite numbers")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def generations(self, n_units: int) -> int:
        """Generations one run needs for ``n_units`` units (not counting the unperturbed answer)."""
        if self.method == "lime":
            return self.n_samples
        if self.method == "shapley":
            return 1 + self.n_samples * n_units
        return 1 + n_units


# ----------------------------------------------------------------------------------------------------------
# Units and perturbations


@dataclass(frozen=True)
class Unit:
    """One interpretable feature: an exact piece of the query or the context.

    The pieces of a segment concatenate back to the segment's text; whitespace belongs to the unit that
    follows it (``" Paris"``).
    """

    text: str
    segment: str

    def to_dict(self) -> dict[str, str]:
        return {"text": self.text, "segment": self.segment}


_WORD = re.compile(r"\s*\S+")
_SENTENCE_END = re.compile(r"(?:[.!?…]+[\"'”’)\]]*(?=\s)|\n+)")


def _attach_trailing(pieces: list[str], text: str) -> list[str]:
    joined = "".join(pieces)
    if joined != text:
        if not pieces:
            return [text] if text else []
        rest = text[len(joined):]
        pieces[-1] += rest
    return pieces


def _cut(text: str, cuts: Sequence[int]) -> list[str]:
    """Split ``text`` at ``cuts`` (sorted positions), moving each cut left over whitespace so that
    whitespace starts the following piece."""
    fixed: list[int] = []
    previous = 0
    for c in sorted(set(int(c) for c in cuts)):
        if c <= previous or c >= len(text):
            continue
        while c - 1 > previous and text[c - 1].isspace():
            c -= 1
        if c > previous:
            fixed.append(c)
            previous = c
    bounds = [0, *fixed, len(text)]
    return [text[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def split_units(text: str, granularity: str, tokenizer: Any = None) -> list[str]:
    """Split ``text`` into units whose concatenation is exactly ``text``.

    Args:
        text: the segment (query or context).
        granularity: ``"token"`` (needs ``tokenizer``; a fast tokenizer's character offsets), ``"word"``
            or ``"sentence"`` (ends at ``.``, ``!``, ``?``, ``…`` followed by whitespace, and at newlines).

    Raises:
        ValueError: unknown granularity, or token granularity without a tokenizer.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    if not text:
        return []
    if granularity == "word":
        pieces = [m.group(0) for m in _WORD.finditer(text)]
        return _attach_trailing(pieces, text)
    if granularity == "sentence":
        cuts = [m.end() for m in _SENTENCE_END.finditer(text)]
        pieces = _cut(text, cuts)
        # a piece that is only whitespace joins its neighbour
        merged: list[str] = []
        for p in pieces:
            if merged and not p.strip():
                merged[-1] += p
            elif merged and not merged[-1].strip():
                merged[-1] += p
            else:
                merged.append(p)
        return merged
    if tokenizer is None:
        raise ValueError("token granularity needs the model's tokenizer")
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
    except (NotImplementedError, TypeError, KeyError, ValueError):
        offsets = None
    if offsets:
        pieces = _cut(text, [start for start, _ in offsets])
        if "".join(pieces) == text:
            return pieces
    # a tokenizer without offsets: decode token by token, if that reproduces the text
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    if "".join(pieces) == text:
        return [p for p in pieces if p]
    logger.warning("token granularity unavailable for this tokenizer; using words")
    return split_units(text, "word")


_HOMOGLYPHS = {
    "a": "а", "c": "с", "e": "е", "i": "і", "j": "ј", "o": "о", "p": "р", "s": "ѕ", "x": "х", "y": "у",
    "A": "А", "B": "В", "C": "С", "E": "Е", "H": "Н", "I": "І", "J": "Ј", "K": "К", "M": "М", "O": "О",
    "P": "Р", "S": "Ѕ", "T": "Т", "X": "Х", "Y": "Ү",
}


def unicode_perturb(text: str) -> str:
    """The paper's character-level Unicode alteration, made deterministic: every ASCII letter or digit
    becomes a look-alike from another script (Cyrillic where one exists, else its fullwidth form); other
    characters, whitespace included, are kept. Non-ASCII letters get a combining low line (U+0332)."""
    out = []
    for ch in text:
        if ch in _HOMOGLYPHS:
            out.append(_HOMOGLYPHS[ch])
        elif ch.isascii() and ch.isalnum():
            out.append(chr(ord(ch) + 0xFEE0))
        elif ch.isalnum():
            out.append(ch + "\u0332")
        else:
            out.append(ch)
    return "".join(out)


def baseline_of(unit: str, perturbation: str) -> str:
    """The text that replaces a masked unit."""
    if perturbation == "remove":
        return ""
    if perturbation == "unicode":
        return unicode_perturb(unit)
    raise ValueError(f"perturbation must be one of {', '.join(PERTURBATIONS)}, got {perturbation!r}")


def draw_masks(n: int, n_units: int, rng: np.random.Generator) -> np.ndarray:
    """N uniform binary masks over ``n_units`` units; an all-zero row gets one random 1 (Alg. 1, 4–7).

    Returns:
        ``(n, n_units)`` int64 of 0/1.
    """
    if n_units < 1:
        raise ValueError("there are no units to perturb")
    masks = rng.integers(0, 2, size=(n, n_units), dtype=np.int64)
    for row in np.flatnonzero(masks.sum(axis=1) == 0):
        masks[row, rng.integers(0, n_units)] = 1
    return masks


# ----------------------------------------------------------------------------------------------------------
# Response score and labels


def response_score(length_ratio: float, similarity: float, gamma_length: float, gamma_similarity: float) -> float:
    """SMA eq. 14: r = γ₁ · length ratio + γ₂ · similarity."""
    return float(gamma_length) * float(length_ratio) + float(gamma_similarity) * float(similarity)


def classify_units(
    beta_first: np.ndarray, ads: np.ndarray, tau: float = DEFAULT_TAU, tau1: float = DEFAULT_TAU1,
    tau2: float = DEFAULT_TAU2,
) -> list[str]:
    """The three-way label of every unit (SMA eqs. 19 and 21, Algorithm 1 lines 15–28).

    Args:
        beta_first: the attribution the first tier tests against τ, shape ``(L,)``.
        ads: Diff(β_j) = β_on − β_off, shape ``(L,)``.
        tau: β_j ≥ τ → pretrained member.
        tau1, tau2: the non-member band; ``min(τ₁, τ₂) ≤ Diff < max(τ₁, τ₂)`` → non-member (the paper's
            printed ``τ₁ ≤ Diff < τ₂`` with τ₁ = 0.1, τ₂ = −0.1 is empty as written).

    Returns:
        One of :data:`LABELS` per unit.
    """
    beta_first = np.asarray(beta_first, dtype=np.float64)
    ads = np.asarray(ads, dtype=np.float64)
    if beta_first.shape != ads.shape or beta_first.ndim != 1:
        raise ValueError(f"beta and ADS must be 1-D of the same length, got {beta_first.shape} and {ads.shape}")
    low, high = min(tau1, tau2), max(tau1, tau2)
    labels = []
    for b, d in zip(beta_first, ads):
        if b >= tau:
            labels.append(PRETRAINED)
        elif low <= d < high:
            labels.append(NON_MEMBER)
        else:
            labels.append(RETRIEVED)
    return labels


# ----------------------------------------------------------------------------------------------------------
# captum


class _ScoreLabel:
    """The "tokenizer" captum uses to label the attributed output: the output here is the single scalar
    r⁽ⁱ⁾ of eq. 14, not a token sequence, so it is represented by one pseudo-token ``"r"`` (id 0). captum
    only calls ``decode`` and ``__call__`` on it to format ``LLMAttributionResult.output_tokens``."""

    TEXT = "r"

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return self.TEXT

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        return [0]

    def __call__(self, text: str, **kwargs: Any) -> dict[str, Any]:
        return {"input_ids": [0], "offset_mapping": [(0, len(text))]}


def make_attribution(
    method: str,
    model: torch.nn.Module,
    score_fn: Callable[[list[str], torch.Tensor], list[float]],
    *,
    masks: np.ndarray | None = None,
    alpha: float = 1.0,
    fit_intercept: bool = True,
) -> tuple[Any, Any]:
    """Build the captum attribution object for one run.

    Args:
        method: one of :data:`METHODS`.
        model: the language model (captum reads its device; captum never calls it here: generation happens
            in ``score_fn``).
        score_fn: ``score_fn(prompts, masks) -> scores``: the response score of each perturbed prompt;
            ``masks`` is the ``(k, L)`` interpretable mask of the batch.
        masks: the ``(N, L)`` masks Lime must use (in this order).
        alpha, fit_intercept: the ridge of eq. 16.

    Returns:
        ``(llm_attribution, interpretable_model_or_None)``.
    """
    from captum._utils.models.linear_model import SkLearnRidge
    from captum.attr import FeatureAblation, LLMAttribution, Lime, ShapleyValueSampling

    class _ResponseScoreAttribution(LLMAttribution):
        """LLMAttribution whose forward function returns SMA's r⁽ⁱ⁾ for each perturbed prompt."""

        def __init__(self, attr_method: Any) -> None:
            super().__init__(attr_method, _ScoreLabel())
            self.include_per_token_attr = False  # one scalar (r) per perturbed input

        def _forward_func(self, perturbed_tensor: torch.Tensor | None, inp: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            rows = inp.to_tensor() if perturbed_tensor is None else perturbed_tensor
            rows = rows.reshape(-1, inp.n_itp_features)
            prompts = [inp.to_model_input(rows[i : i + 1]) for i in range(rows.shape[0])]
            scores = score_fn(prompts, rows.detach().cpu())
            return torch.tensor(scores, dtype=torch.float32, device=rows.device)

    ridge = None
    if method == "lime":
        if masks is None:
            raise ValueError("Lime needs the pre-drawn masks")
        ridge = SkLearnRidge(alpha=float(alpha), fit_intercept=bool(fit_intercept))
        drawn = np.asarray(masks, dtype=np.int64)

        def perturb(original_inp: torch.Tensor, **kwargs: Any):  # a generator: captum draws from it in order
            for row in drawn:
                yield torch.as_tensor(row[None, :], dtype=torch.long, device=original_inp.device)

        def constant_kernel(*args: Any, **kwargs: Any) -> float:
            return 1.0  # unweighted least squares: eq. 16 has no LIME similarity kernel

        attr_method = Lime(model, interpretable_model=ridge, similarity_func=constant_kernel, perturb_func=perturb)
    elif method == "shapley":
        attr_method = ShapleyValueSampling(model)
    elif method == "ablation":
        attr_method = FeatureAblation(model)
    else:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    return _ResponseScoreAttribution(attr_method), ridge


def run_captum(
    method: str,
    model: torch.nn.Module,
    units: list[str],
    baselines: list[str],
    build_prompt_fn: Callable[[list[str]], str],
    score_fn: Callable[[list[str], torch.Tensor], list[float]],
    *,
    n_samples: int,
    masks: np.ndarray | None = None,
    alpha: float = 1.0,
    fit_intercept: bool = True,
    batch_size: int = 8,
    seed: int = 0,
) -> tuple[np.ndarray, float | None]:
    """Attribute ``score_fn`` to ``units`` with captum; returns ``(β, intercept or None)``.

    ``build_prompt_fn(values)`` turns the (perturbed) unit strings into the model prompt; captum's
    ``TextTemplateInput`` swaps a masked unit for its baseline before calling it.
    """
    from captum.attr import TextTemplateInput

    if len(units) != len(baselines) or not units:
        raise ValueError("need at least one unit and one baseline per unit")
    inp = TextTemplateInput(template=lambda *values: build_prompt_fn(list(values)), values=list(units), baselines=list(baselines))
    attribution, ridge = make_attribution(
        method, model, score_fn, masks=masks, alpha=alpha, fit_intercept=fit_intercept
    )
    target = torch.tensor([0], dtype=torch.long)  # the pseudo-token "r": see _ScoreLabel
    kwargs: dict[str, Any] = {"perturbations_per_eval": max(1, int(batch_size))}
    if method == "lime":
        kwargs["n_samples"] = int(masks.shape[0]) if masks is not None else int(n_samples)
    elif method == "shapley":
        kwargs["n_samples"] = int(n_samples)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        result = attribution.attribute(inp, target=target, **kwargs)
    beta = result.seq_attr.detach().cpu().numpy().astype(np.float64).reshape(-1)
    intercept = None
    if ridge is not None and fit_intercept:
        bias = ridge.bias()
        intercept = None if bias is None else float(bias.reshape(-1)[0])
    return beta, intercept


# ----------------------------------------------------------------------------------------------------------
# The language-model scorer


@dataclass
class Sample:
    """One perturbed input and its scored answer."""

    mask: str
    answer: str
    n_tokens: int
    length_ratio: float
    similarity: float
    score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Scorer:
    """Generates the answers of perturbed prompts (batched, cached) and scores them with eq. 14."""

    def __init__(
        self,
        handle: ModelHandle,
        template: Any,
        settings: SMASettings,
        units: list[str],
        baselines: list[str],
        reference_answer: str,
        reference_tokens: int,
        on_generation: Callable[[int], None] | None = None,
    ) -> None:
        self.handle = handle
        self.template = template
        self.settings = settings
        self.units = units
        self.baselines = baselines
        self.reference_answer = reference_answer
        self.reference_tokens = reference_tokens
        self.on_generation = on_generation
        self.gen_settings = DualPathSettings(max_new_tokens=settings.max_new_tokens, template=settings.template)
        self.cache: dict[tuple[int, ...], tuple[str, int]] = {}
        self.samples: list[Sample] = []
        self.generations = 0
        self._reference_embedding = embed([reference_answer])[0] if settings.reference == "answer" else None

    def answers(self, prompts: list[str]) -> list[tuple[str, int]]:
        """(answer text, answer length in tokens without the final EOS) of each prompt, greedy."""
        ids = [tuple(encode_prompt(self.template, self.handle.tokenizer, p)) for p in prompts]
        todo = [i for i in dict.fromkeys(ids) if i not in self.cache]
        eos = set(self.handle.eos_token_ids)
        for start in range(0, len(todo), self.settings.batch_size):
            batch = todo[start : start + self.settings.batch_size]
            outs = generate_greedy(self.handle, [list(b) for b in batch], self.gen_settings)
            for key, (tokens, _logits, _finish) in zip(batch, outs):
                n = len(tokens) - (1 if tokens and tokens[-1] in eos else 0)
                text = self.handle.tokenizer.decode(tokens, skip_special_tokens=True).strip()
                self.cache[key] = (text, n)
        return [self.cache[i] for i in ids]

    def perturbed_text(self, mask: Sequence[int]) -> str:
        return "".join(u if m else b for u, b, m in zip(self.units, self.baselines, mask))

    def __call__(self, prompts: list[str], masks: torch.Tensor) -> list[float]:
        answers = self.answers(prompts)
        mask_rows = masks.numpy().astype(np.int64).tolist()
        texts = [a for a, _ in answers]
        if self.settings.reference == "answer":
            emb = embed(texts)
            sims = emb.astype(np.float64) @ self._reference_embedding.astype(np.float64)
            denominators = [max(1, self.reference_tokens)] * len(texts)
        else:
            inputs = [self.perturbed_text(m) for m in mask_rows]
            emb = embed(texts + inputs)
            a, b = emb[: len(texts)].astype(np.float64), emb[len(texts):].astype(np.float64)
            sims = np.einsum("ij,ij->i", a, b)
            denominators = [
                max(1, len(self.handle.tokenizer(x, add_special_tokens=False)["input_ids"])) for x in inputs
            ]
        scores = []
        for (text, n), sim, den, m in zip(answers, sims, denominators, mask_rows):
            ratio = n / den
            r = response_score(ratio, float(sim), self.settings.gamma_length, self.settings.gamma_similarity)
            self.samples.append(Sample("".join(str(int(v)) for v in m), text, int(n), float(ratio), float(sim), r))
            scores.append(r)
        self.generations += len(prompts)
        if self.on_generation is not None:
            self.on_generation(len(prompts))
        return scores


# ----------------------------------------------------------------------------------------------------------
# Results


@dataclass
class SMARun:
    """One attribution run (retrieval on or off).

    Attributes:
        rag: whether the context was in the prompt.
        prompt: the unperturbed prompt.
        reference_answer: ŷ, the greedy answer to the unperturbed prompt.
        reference_tokens: Len(ŷ) in tokens (final EOS excluded).
        unit_indices: indices into :attr:`SMAResult.units` of this run's features.
        beta: the attribution of each of this run's units, shape ``(L_run,)``.
        intercept: the ridge intercept (only with ``fit_intercept``).
        samples: every perturbed input (as its mask string over this run's units) and its scored answer.
        seconds: wall time of the run.
    """

    rag: bool
    prompt: str
    reference_answer: str
    reference_tokens: int
    unit_indices: list[int]
    beta: np.ndarray
    intercept: float | None
    samples: list[Sample]
    generations: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "rag": self.rag,
            "prompt": self.prompt,
            "reference_answer": self.reference_answer,
            "reference_tokens": self.reference_tokens,
            "unit_indices": list(self.unit_indices),
            "beta": [float(b) for b in self.beta],
            "intercept": self.intercept,
            "samples": [s.to_dict() for s in self.samples],
            "generations": self.generations,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SMARun:
        return cls(
            rag=bool(data["rag"]), prompt=data["prompt"], reference_answer=data["reference_answer"],
            reference_tokens=int(data["reference_tokens"]), unit_indices=[int(i) for i in data["unit_indices"]],
            beta=np.asarray(data["beta"], dtype=np.float64), intercept=data.get("intercept"),
            samples=[Sample(**s) for s in data["samples"]], generations=int(data["generations"]),
            seconds=float(data["seconds"]),
        )


@dataclass
class SMAResult:
    """Both runs, the per-unit attributions and ADS.

    Attributes:
        units: every unit of the query (then of the context, with ``scope="query+context"``).
        beta_on, beta_off: β per unit with retrieval on / off, shape ``(L,)``; a context unit's β_off is 0
            (the RAG-off prompt does not contain it).
        ads: Diff(β_j) = β_on − β_off (eq. 20).
    """

    model: str
    query: str
    context: str
    template: str
    settings: dict[str, Any]
    units: list[Unit]
    beta_on: np.ndarray
    beta_off: np.ndarray
    ads: np.ndarray
    on: SMARun
    off: SMARun
    timings: dict[str, float] = field(default_factory=dict)
    kind: str = "sma"

    @property
    def query_mask(self) -> np.ndarray:
        return np.array([u.segment == QUERY for u in self.units], dtype=bool)

    def labels(self, tau: float = DEFAULT_TAU, tau1: float = DEFAULT_TAU1, tau2: float = DEFAULT_TAU2,
               first_tier: str = "off") -> list[str]:
        """Three-way labels (:func:`classify_units`); ``first_tier`` picks β_off or β_on for the β ≥ τ test."""
        if first_tier not in FIRST_TIER:
            raise ValueError(f"first_tier must be 'off' or 'on', got {first_tier!r}")
        beta = self.beta_off if first_tier == "off" else self.beta_on
        return classify_units(beta, self.ads, tau, tau1, tau2)

    def membership_score(self) -> float:
        """Mean |ADS| over the query units: how much toggling retrieval changes the attribution (higher =
        more retrieval-dependent). The detector score of :data:`DETECTOR_NAME`."""
        q = self.ads[self.query_mask]
        return float(np.mean(np.abs(q))) if q.size else 0.0

    def label_counts(self, **kwargs: Any) -> dict[str, int]:
        labels = self.labels(**kwargs)
        return {label: labels.count(label) for label in LABELS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "query": self.query,
            "context": self.context,
            "template": self.template,
            "settings": dict(self.settings),
            "units": [u.to_dict() for u in self.units],
            "beta_on": [float(b) for b in self.beta_on],
            "beta_off": [float(b) for b in self.beta_off],
            "ads": [float(d) for d in self.ads],
            "membership_score": self.membership_score(),
            "labels_default": self.labels(),
            "on": self.on.to_dict(),
            "off": self.off.to_dict(),
            "timings": dict(self.timings),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SMAResult:
        return cls(
            model=data["model"], query=data["query"], context=data["context"], template=data["template"],
            settings=dict(data["settings"]), units=[Unit(**u) for u in data["units"]],
            beta_on=np.asarray(data["beta_on"], dtype=np.float64), beta_off=np.asarray(data["beta_off"], dtype=np.float64),
            ads=np.asarray(data["ads"], dtype=np.float64), on=SMARun.from_dict(data["on"]),
            off=SMARun.from_dict(data["off"]), timings=dict(data.get("timings", {})),
        )


@dataclass
class ContextAblation:
    """Each context sentence removed in turn (retrieval on, query intact).

    Attributes:
        sentences: the context's sentences.
        full_score: r of the answer with the whole context (γ₁ + γ₂ with ``reference="answer"``).
        scores: r with sentence s removed, shape ``(S,)``.
        delta: full_score − scores: how much removing s moved the answer (higher = the answer leaned on s).
        answers: the answer with sentence s removed.
    """

    model: str
    query: str
    context: str
    settings: dict[str, Any]
    reference_answer: str
    sentences: list[str]
    full_score: float
    scores: np.ndarray
    delta: np.ndarray
    answers: list[str]
    similarities: np.ndarray
    length_ratios: np.ndarray
    seconds: float
    kind: str = "context_ablation"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "model": self.model, "query": self.query, "context": self.context,
            "settings": dict(self.settings), "reference_answer": self.reference_answer,
            "sentences": list(self.sentences), "full_score": self.full_score,
            "scores": [float(s) for s in self.scores], "delta": [float(d) for d in self.delta],
            "answers": list(self.answers), "similarities": [float(s) for s in self.similarities],
            "length_ratios": [float(x) for x in self.length_ratios], "seconds": self.seconds,
        }


# ----------------------------------------------------------------------------------------------------------
# Running SMA on a model


ProgressCallback = Callable[[int, int, str], None]


def _clean_inputs(query: str, context: str) -> tuple[str, str]:
    if not isinstance(query, str) or not isinstance(context, str):
        raise ValueError("query and context must be text")
    query = clean_text(query)[0].strip()
    context = clean_text(context)[0].strip()
    if not query:
        raise ValueError("The query is empty. Type a question (whitespace alone does not count).")
    if not context:
        raise ValueError("The context is empty: SMA compares attributions with and without it. Paste the retrieved passage.")
    return query, context


def _check_budget(handle: ModelHandle, ids: list[int], max_new_tokens: int, what: str) -> None:
    budget = handle.info.max_tokens
    needed = len(ids) + max_new_tokens
    if needed > budget:
        raise ValueError(
            f"Too long for this model: {what} is {len(ids):,} tokens and each answer may take {max_new_tokens} "
            f"more, {needed:,} in all, over the limit of {budget:,}. Shorten the input (nothing is cut automatically)."
        )


def _reference(handle: ModelHandle, template: Any, prompt: str, settings: SMASettings) -> tuple[str, int, list[int]]:
    ids = encode_prompt(template, handle.tokenizer, prompt)
    ((tokens, _logits, _finish),) = generate_greedy(
        handle, [ids], DualPathSettings(max_new_tokens=settings.max_new_tokens, template=settings.template)
    )
    eos = set(handle.eos_token_ids)
    n = len(tokens) - (1 if tokens and tokens[-1] in eos else 0)
    return handle.tokenizer.decode(tokens, skip_special_tokens=True).strip(), n, list(tokens)


def _attribute_run(
    handle: ModelHandle,
    template: Any,
    settings: SMASettings,
    *,
    rag: bool,
    query_units: list[str],
    context_units: list[str] | None,
    context: str,
    masks: np.ndarray | None,
    on_generation: Callable[[int], None] | None,
) -> SMARun:
    """One run: perturb ``query_units`` (and ``context_units`` when given) with retrieval on or off."""
    t0 = time.perf_counter()
    units = list(query_units) + list(context_units or [])
    baselines = [baseline_of(u, settings.perturbation) for u in units]
    nq = len(query_units)

    def prompt_of(values: list[str]) -> str:
        q = "".join(values[:nq])
        if not rag:
            return build_prompt(template, handle.tokenizer, q, None)
        c = "".join(values[nq:]) if context_units is not None else context
        return build_prompt(template, handle.tokenizer, q, c)

    prompt = prompt_of(units)
    worst = prompt_of(baselines) if settings.perturbation == "unicode" else prompt
    _check_budget(handle, encode_prompt(template, handle.tokenizer, worst), settings.max_new_tokens,
                  "the fully perturbed " + ("retrieval" if rag else "parametric") + " prompt")
    answer, n_ref, _ = _reference(handle, template, prompt, settings)
    if on_generation is not None:
        on_generation(1)
    scorer = _Scorer(handle, template, settings, units, baselines, answer, n_ref, on_generation)
    beta, intercept = run_captum(
        settings.method, handle.model, units, baselines, prompt_of, scorer,
        n_samples=settings.n_samples, masks=masks, alpha=settings.alpha, fit_intercept=settings.fit_intercept,
        batch_size=settings.batch_size, seed=settings.seed,
    )
    return SMARun(
        rag=rag, prompt=prompt, reference_answer=answer, reference_tokens=n_ref,
        unit_indices=list(range(len(units))), beta=beta, intercept=intercept, samples=scorer.samples,
        generations=scorer.generations, seconds=time.perf_counter() - t0,
    )


def run_sma(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: SMASettings | None = None,
    *,
    on_progress: ProgressCallback | None = None,
) -> SMAResult:
    """SMA with retrieval on and off, and ADS per unit (see the module docstring).

    Args:
        handle: the shared model (every generation holds ``handle.lock``).
        query, context: user text; both must be non-empty.
        settings: :class:`SMASettings` (defaults if ``None``).
        on_progress: ``on_progress(done, total, stage)`` after every batch of generations; ``stage`` is
            ``"RAG on"`` or ``"RAG off"``.

    Raises:
        ValueError: empty inputs, bad settings, or a prompt over the model's token budget.
    """
    settings = settings or SMASettings()
    settings.validate()
    query, context = _clean_inputs(query, context)
    template = resolve_template(settings.template, handle.tokenizer)
    query_units = split_units(query, settings.granularity, handle.tokenizer)
    context_units = split_units(context, settings.granularity, handle.tokenizer) if settings.scope == "query+context" else None
    nq, nc = len(query_units), len(context_units or [])
    rng = np.random.default_rng(settings.seed)
    masks_on = masks_off = None
    if settings.method == "lime":
        # the query part is shared by both runs (the same perturbed inputs, eqs. 17–18); a context part, if
        # any, is drawn independently (the query part is never all zero, so Alg. 1's fix is not needed)
        mq = draw_masks(settings.n_samples, nq, rng)
        masks_off = mq
        masks_on = np.concatenate([mq, rng.integers(0, 2, size=(settings.n_samples, nc), dtype=np.int64)], axis=1) if nc else mq
    total_on = 1 + settings.generations(nq + nc)
    total_off = 1 + settings.generations(nq)
    total = total_on + total_off
    done = 0

    def progress(stage: str) -> Callable[[int], None]:
        def step(k: int) -> None:
            nonlocal done
            done += k
            if on_progress is not None:
                on_progress(min(done, total), total, stage)
        return step

    t0 = time.perf_counter()
    on = _attribute_run(handle, template, settings, rag=True, query_units=query_units, context_units=context_units,
                        context=context, masks=masks_on, on_generation=progress("RAG on"))
    done = total_on
    off = _attribute_run(handle, template, settings, rag=False, query_units=query_units, context_units=None,
                         context=context, masks=masks_off, on_generation=progress("RAG off"))
    done = total
    if on_progress is not None:
        on_progress(done, total, "RAG off")
    units = [Unit(u, QUERY) for u in query_units] + [Unit(u, CONTEXT) for u in (context_units or [])]
    beta_on = np.asarray(on.beta, dtype=np.float64)
    beta_off = np.zeros(len(units), dtype=np.float64)
    beta_off[:nq] = off.beta
    return SMAResult(
        model=handle.info.name, query=query, context=context, template=template.key, settings=settings.to_dict(),
        units=units, beta_on=beta_on, beta_off=beta_off, ads=beta_on - beta_off, on=on, off=off,
        timings={"on_s": on.seconds, "off_s": off.seconds, "total_s": time.perf_counter() - t0},
    )


def run_context_ablation(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: SMASettings | None = None,
    *,
    on_progress: ProgressCallback | None = None,
) -> ContextAblation:
    """The faster comparison: each context sentence removed in turn (retrieval on, query intact), scored
    with the same response score; captum's ``FeatureAblation`` over sentence units with an empty baseline.

    Costs S + 2 generations for S sentences (the unperturbed answer, the full input once more, each
    sentence removed).
    """
    settings = settings or SMASettings()
    settings.validate()
    query, context = _clean_inputs(query, context)
    template = resolve_template(settings.template, handle.tokenizer)
    sentences = split_units(context, "sentence")
    ablation = SMASettings(**{**settings.to_dict(), "method": "ablation", "perturbation": "remove"})
    total = len(sentences) + 2
    done = 0

    def step(k: int) -> None:
        nonlocal done
        done += k
        if on_progress is not None:
            on_progress(min(done, total), total, "context ablation")

    t0 = time.perf_counter()
    prompt_full = build_prompt(template, handle.tokenizer, query, context)
    _check_budget(handle, encode_prompt(template, handle.tokenizer, prompt_full), settings.max_new_tokens, "the retrieval prompt")
    answer, n_ref, _ = _reference(handle, template, prompt_full, ablation)
    step(1)
    baselines = [""] * len(sentences)
    scorer = _Scorer(handle, template, ablation, sentences, baselines, answer, n_ref, step)

    def prompt_of(values: list[str]) -> str:
        return build_prompt(template, handle.tokenizer, query, "".join(values).strip())

    run_captum("ablation", handle.model, sentences, baselines, prompt_of, scorer,
               n_samples=1, alpha=ablation.alpha, batch_size=ablation.batch_size, seed=ablation.seed)
    by_mask = {s.mask: s for s in scorer.samples}
    full = by_mask["1" * len(sentences)]
    rows = [by_mask["".join("0" if j == i else "1" for j in range(len(sentences)))] for i in range(len(sentences))]
    scores = np.array([r.score for r in rows], dtype=np.float64)
    return ContextAblation(
        model=handle.info.name, query=query, context=context, settings=ablation.to_dict(), reference_answer=answer,
        sentences=sentences, full_score=full.score, scores=scores, delta=full.score - scores,
        answers=[r.answer for r in rows], similarities=np.array([r.similarity for r in rows]),
        length_ratios=np.array([r.length_ratio for r in rows]), seconds=time.perf_counter() - t0,
    )
