"""Self-Critique (Tao et al., "Detecting Data Contamination from Reinforcement Learning Post-training for
Large Language Models", arXiv:2510.09259), on one path of the dual-path protocol.

The method, step by step (paper §4.1; the instruction text is the one in the authors' released code):

1. Initial response: r₁ = greedy answer to the prompt T(q) (here: the query with or without the context).
2. Self-critique probe: q′ = q ⊕ I_critique(r₁) — the query followed by an instruction to give a response
   that "follows a different reasoning path or provides an alternative solution", with r₁ quoted — and
   r₂ = greedy answer to T(q′). The released code lets r₂ run for twice r₁'s token limit.
3. Token entropies of both generations, from the generation's own logits::

       H_t = −Σ_v p(v | x, y_<t) log p(v | x, y_<t)              (nats)

   approximated, as the paper does for API access, by the entropy of the top-K probabilities renormalized
   to sum to one (K = 3 … 100, or the exact full-vocabulary entropy). E₁ = (H_1 … H_n₁), E₂ = (H_1 … H_n₂);
   every generated step counts, the final end-of-sequence step included.
4. Score (length-penalized cosine)::

       S = cos(Ẽ₁, Ẽ₂) · min(n₁, n₂) / max(n₁, n₂)

   where Ẽ are the sequences zero-padded to max(n₁, n₂). S = 0 when either sequence is empty or all zero.
   High S ⇒ the model could not leave its first reasoning path when asked to ⇒ evidence of contamination
   (policy collapse); low S ⇒ it answered differently.

Caveats from the paper: the signal targets RL-phase contamination of reasoning tasks (math/logic); it is
weaker where many valid solutions exist and it needs the first answer as an anchor (without r₁ in the probe
the AUC collapses). It ranks prompts; a single score is not a verdict.

Top-K note: the paper's released code computes −Σ p log p over the top-K log-probabilities returned by the
API without renormalizing them; this project (docs/architecture.md, "Method notes") and
:func:`core.maths.divergence.topk_entropy` renormalize. The two agree as the tail mass outside the top K
vanishes, and both converge to the full entropy as K grows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from core.engine import DualPathSettings, EventCallback, generate_greedy
from core.maths.divergence import entropy, log_probs, row_slices
from core.model.handle import ModelHandle
from core.model.prompts import (
    TEMPLATE_CHOICES,
    PromptTemplate,
    build_prompt,
    clean_inputs,
    encode_prompt,
    resolve_template,
)

logger = logging.getLogger(__name__)

RESPONSE_SLOT = "{response}"
DEFAULT_INSTRUCTION = (
    "A possible answer is provided below (it may or may not be correct). Please provide a response that follows "
    "a different reasoning path or provides an alternative solution:\n---\n{response}\n---\n"
    "Please now provide your new, different response:"
)
"""I_critique of the paper, verbatim from the authors' released code (``SELF_CRITIQUE_INSTRUCTION``), whose
leading newline :func:`critique_query` puts between the query and the instruction (so the box shows no blank
first line and the prompt is byte for byte the authors')."""

STORED_TOP = 100
"""Top log-probabilities kept per generated step, so any K ≤ 100 can be re-scored without generating again."""
K_CHOICES: tuple[int | None, ...] = (3, 5, 10, 20, 50, 100, None)
"""The selectable K (``None`` = the full vocabulary)."""
DEFAULT_K = 50
"""The released code's default ``--K 50`` (the paper reports K = 3 … 50 give near-identical AUC)."""

FIRST = "first"
CRITIQUE = "critique"
DETECTOR_NAME = "selfcritique"


@dataclass(frozen=True)
class SelfCritiqueSettings:
    """Settings of a Self-Critique run.

    Attributes:
        max_new_tokens: most tokens of r₁.
        critique_max_new_tokens: most tokens of r₂ (``None`` = 2 × ``max_new_tokens``, as the released code).
        top_k: K of the entropy approximation (``None`` = full vocabulary); only used for the score, the
            result keeps enough to re-score with any K of :data:`K_CHOICES`.
        use_context: answer with the context (retrieval path) or without it (parametric path, the paper's
            setting).
        template: prompt template key (see :mod:`core.model.prompts`).
        instruction: I_critique, with ``{response}`` where r₁ goes.
    """

    max_new_tokens: int = 64
    critique_max_new_tokens: int | None = None
    top_k: int | None = DEFAULT_K
    use_context: bool = False
    template: str = "auto"
    instruction: str = DEFAULT_INSTRUCTION

    @property
    def critique_tokens(self) -> int:
        return self.critique_max_new_tokens if self.critique_max_new_tokens is not None else 2 * self.max_new_tokens

    def validate(self) -> None:
        if not 1 <= self.max_new_tokens <= 1024:
            raise ValueError(f"max_new_tokens must be between 1 and 1024, got {self.max_new_tokens}")
        if not 1 <= self.critique_tokens <= 2048:
            raise ValueError(
                f"the critique answer's token limit must be between 1 and 2048, got {self.critique_tokens}"
            )
        check_k(self.top_k)
        if self.template not in TEMPLATE_CHOICES:
            raise ValueError(f"Unknown template {self.template!r}; choose one of {', '.join(TEMPLATE_CHOICES)}")
        if RESPONSE_SLOT not in self.instruction:
            raise ValueError(
                f"The critique instruction must contain {RESPONSE_SLOT} where the first answer goes "
                "(the probe needs r₁ as its anchor)."
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_k(k: int | None) -> None:
    """Raise ``ValueError`` unless ``k`` is ``None`` (full vocabulary) or 1 ≤ k ≤ :data:`STORED_TOP`."""
    if k is None:
        return
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= int(k) <= STORED_TOP:
        raise ValueError(f"K must be between 1 and {STORED_TOP} or None (full vocabulary), got {k!r}")


def critique_query(query: str, first_answer: str, instruction: str = DEFAULT_INSTRUCTION) -> str:
    """q′ = q ⊕ I_critique(r₁): the query followed by the instruction with r₁ in its ``{response}`` slot.

    The slot is filled by plain replacement (no ``str.format``), so braces in the query or the answer are
    kept as they are.
    """
    if RESPONSE_SLOT not in instruction:
        raise ValueError(f"The critique instruction must contain {RESPONSE_SLOT}")
    separator = "" if instruction[:1].isspace() else "\n"  # an instruction of an earlier release began with "\n"
    return query + separator + instruction.replace(RESPONSE_SLOT, first_answer)


def penalized_cosine(e1: Sequence[float] | np.ndarray, e2: Sequence[float] | np.ndarray) -> float:
    """The Self-Critique score S = cos(Ẽ₁, Ẽ₂) · min(n₁, n₂)/max(n₁, n₂), computed in float64.

    Args:
        e1, e2: entropy sequences E₁ (length n₁) and E₂ (length n₂), nats; Ẽ are zero-padded to max(n₁, n₂).

    Returns:
        S in [−1, 1] (in [0, 1] for entropies, which are non-negative); 0.0 when a sequence is empty or has
        zero norm.
    """
    a = np.asarray(e1, dtype=np.float64).reshape(-1)
    b = np.asarray(e2, dtype=np.float64).reshape(-1)
    if a.size == 0 or b.size == 0:
        return 0.0
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("entropy sequences must be finite")
    width = max(a.size, b.size)
    pa = np.zeros(width)
    pb = np.zeros(width)
    pa[: a.size] = a
    pb[: b.size] = b
    norm = np.linalg.norm(pa) * np.linalg.norm(pb)
    if norm == 0.0:
        return 0.0
    cosine = float(np.dot(pa, pb) / norm)
    return cosine * min(a.size, b.size) / max(a.size, b.size)


def entropy_sequence(top_logp: np.ndarray, full_entropy: np.ndarray, k: int | None) -> np.ndarray:
    """E = (H_1 … H_n) for a chosen K from what a run stores.

    Args:
        top_logp: ``(n, m)`` the m largest full-vocabulary log-probabilities of each step, descending.
        full_entropy: ``(n,)`` the exact full-vocabulary entropy of each step, nats.
        k: K (``None``, or K ≥ the vocabulary size, gives ``full_entropy``).

    Returns:
        ``(n,)`` float32 entropies in nats: the entropy of the K largest probabilities renormalized to sum
        to one — the same value :func:`core.maths.divergence.topk_entropy` gives on the full distribution,
        since only the K largest log-probabilities enter it.
    """
    check_k(k)
    full = np.asarray(full_entropy, dtype=np.float32)
    top = np.asarray(top_logp, dtype=np.float32)
    if top.ndim != 2 or top.shape[0] != full.shape[0]:
        raise ValueError(f"top_logp must be (n, m) with n = {full.shape[0]}, got {top.shape}")
    if k is None or (top.shape[1] < STORED_TOP and k >= top.shape[1]):
        return full  # the full entropy was asked for, or the stored top already is the whole vocabulary
    if top.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    renormalized = torch.log_softmax(torch.from_numpy(top[:, : int(k)]), dim=-1)
    return entropy(renormalized).numpy().astype(np.float32)


@dataclass
class SelfCritiqueResult:
    """Both responses, their prompts and the per-step entropy material.

    Attributes:
        first_prompt, critique_prompt: the exact prompts of r₁ and r₂.
        first_answer, critique_answer: r₁ and r₂ (decoded, special tokens removed).
        first_ids, critique_ids: their token ids (the final end-of-sequence token included when generated).
        first_top_logp, critique_top_logp: ``(n, m)`` float32, the m = min(100, V) largest log-probabilities
            of each generated step, descending.
        first_entropy, critique_entropy: ``(n,)`` float32 exact full-vocabulary entropies, nats.
        top_k: the K the :meth:`score` uses by default.
    """

    model: str
    query: str
    context: str
    use_context: bool
    template: str
    instruction: str
    settings: dict[str, Any]
    first_prompt: str
    critique_prompt: str
    first_prompt_len: int
    critique_prompt_len: int
    first_answer: str
    critique_answer: str
    first_ids: list[int]
    critique_ids: list[int]
    first_tokens: list[str]
    critique_tokens: list[str]
    first_finish: str
    critique_finish: str
    first_top_logp: np.ndarray
    critique_top_logp: np.ndarray
    first_entropy: np.ndarray
    critique_entropy: np.ndarray
    top_k: int | None
    timings: dict[str, float] = field(default_factory=dict)
    kind: str = "selfcritique"

    def entropies(self, k: int | str | None = "default") -> tuple[np.ndarray, np.ndarray]:
        """(E₁, E₂) for K = ``k`` (default: :attr:`top_k`; ``None`` = full vocabulary)."""
        k = self.top_k if k == "default" else k
        return (
            entropy_sequence(self.first_top_logp, self.first_entropy, k),  # type: ignore[arg-type]
            entropy_sequence(self.critique_top_logp, self.critique_entropy, k),  # type: ignore[arg-type]
        )

    def score(self, k: int | str | None = "default") -> float:
        """S = cos(Ẽ₁, Ẽ₂) · min/max length (high ⇒ contaminated)."""
        e1, e2 = self.entropies(k)
        return penalized_cosine(e1, e2)

    def summary(self, k: int | str | None = "default") -> dict[str, Any]:
        """A small JSON-ready summary (for ``extras`` and the evaluate CSV)."""
        e1, e2 = self.entropies(k)
        return {
            "score": penalized_cosine(e1, e2),
            "top_k": self.top_k if k == "default" else k,
            "use_context": self.use_context,
            "first_answer": self.first_answer,
            "critique_answer": self.critique_answer,
            "n_first": len(self.first_ids),
            "n_critique": len(self.critique_ids),
            "length_ratio": min(len(e1), len(e2)) / max(len(e1), len(e2)) if len(e1) and len(e2) else 0.0,
            "entropy_first": [float(x) for x in e1],
            "entropy_critique": [float(x) for x in e2],
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in asdict(self).items():
            if isinstance(value, np.ndarray):
                out[name] = value.tolist()
            else:
                out[name] = value
        out["score"] = self.score()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SelfCritiqueResult:
        kwargs = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for name in ("first_top_logp", "critique_top_logp"):
            kwargs[name] = np.asarray(kwargs[name], dtype=np.float32).reshape(len(kwargs[name]), -1)
        for name in ("first_entropy", "critique_entropy"):
            kwargs[name] = np.asarray(kwargs[name], dtype=np.float32)
        return cls(**kwargs)


def _entropy_material(logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(top log-probs (n, m) descending, full entropy (n,)) of a generation's logits, float32; computed in slices of
    positions (:func:`core.maths.divergence.row_slices`), so no ``n × V`` float32 copy is whole."""
    if logits.shape[0] == 0:
        return np.zeros((0, 0), dtype=np.float32), np.zeros(0, dtype=np.float32)
    tops, fulls = [], []
    for rows in row_slices(logits.shape[0], logits.shape[-1]):
        lp = log_probs(logits[rows])
        fulls.append(entropy(lp).cpu().numpy().astype(np.float32))
        tops.append(torch.topk(lp, min(STORED_TOP, lp.shape[-1]), dim=-1).values.cpu().numpy().astype(np.float32))
    return np.concatenate(tops), np.concatenate(fulls)


def _answer(
    handle: ModelHandle,
    prompt_ids: list[int],
    max_new_tokens: int,
    settings: SelfCritiqueSettings,
    path: str,
    on_event: EventCallback | None,
) -> tuple[list[int], str, np.ndarray, np.ndarray]:
    """One greedy answer: its ids, finish reason, top log-probs and full entropies (the logits are not kept)."""
    answer_settings = DualPathSettings(max_new_tokens=max_new_tokens, template=settings.template)
    ((ids, logits, finish),) = generate_greedy(handle, [prompt_ids], answer_settings, paths=[path], on_event=on_event)
    top, full = _entropy_material(logits)
    return ids, finish, top, full


def _critique_prompt(
    handle: ModelHandle,
    template: PromptTemplate,
    query: str,
    first_answer: str,
    ctx: str | None,
    settings: SelfCritiqueSettings,
) -> tuple[str, list[int]]:
    """The critique prompt (query + instruction + r₁) and its ids; refused over the model's token budget."""
    budget = handle.info.max_tokens
    critique_prompt = build_prompt(
        template, handle.tokenizer, critique_query(query, first_answer, settings.instruction), ctx
    )
    critique_ids = encode_prompt(template, handle.tokenizer, critique_prompt)
    if len(critique_ids) + settings.critique_tokens > budget:
        raise ValueError(
            f"Too long for this model: the critique prompt (query + instruction + first answer) is "
            f"{len(critique_ids):,} tokens and the second answer may take {settings.critique_tokens} more, over the "
            f"limit of {budget:,} tokens. Lower the answer lengths or shorten the input "
            "(the first answer is never cut)."
        )
    return critique_prompt, critique_ids


def run_self_critique(
    handle: ModelHandle,
    query: str,
    context: str = "",
    settings: SelfCritiqueSettings | None = None,
    *,
    on_event: EventCallback | None = None,
) -> SelfCritiqueResult:
    """Generate r₁ and r₂ greedily and keep what the score needs.

    Args:
        handle: the shared model (each generation runs through ``handle.generate``, via
            :func:`core.engine.generation.generate_greedy`).
        query: the question (the paper's q).
        context: the retrieved passage; used only when ``settings.use_context``.
        on_event: streaming callback; events have ``path == "first"`` for r₁ and ``"critique"`` for r₂.

    Raises:
        ValueError: empty query (or empty context with ``use_context``), bad settings, or a prompt over the
            model's token budget (nothing is truncated: the paper's code cuts r₁ to fit, we refuse instead).
    """
    settings = settings or SelfCritiqueSettings()
    settings.validate()
    query, context, _ = clean_inputs(query, context)
    if settings.use_context and not context:
        raise ValueError(
            "'With the context' is selected but the context is empty. Paste the passage or answer without it."
        )
    template = resolve_template(settings.template, handle.tokenizer)
    ctx = context if settings.use_context else None
    budget = handle.info.max_tokens

    first_prompt = build_prompt(template, handle.tokenizer, query, ctx)
    first_ids = encode_prompt(template, handle.tokenizer, first_prompt)
    if len(first_ids) + settings.max_new_tokens > budget:
        raise ValueError(
            f"Too long for this model: the prompt is {len(first_ids):,} tokens and the first answer may take "
            f"{settings.max_new_tokens} more, over the limit of {budget:,} tokens. Shorten the input."
        )
    t0 = time.perf_counter()
    r1_ids, r1_finish, r1_top, r1_full = _answer(handle, first_ids, settings.max_new_tokens, settings, FIRST, on_event)
    first_answer = handle.tokenizer.decode(r1_ids, skip_special_tokens=True).strip()
    t1 = time.perf_counter()

    critique_prompt, critique_ids = _critique_prompt(handle, template, query, first_answer, ctx, settings)
    r2_ids, r2_finish, r2_top, r2_full = _answer(
        handle, critique_ids, settings.critique_tokens, settings, CRITIQUE, on_event
    )
    t2 = time.perf_counter()
    return SelfCritiqueResult(
        model=handle.info.name,
        query=query,
        context=context,
        use_context=settings.use_context,
        template=template.key,
        instruction=settings.instruction,
        settings=settings.to_dict(),
        first_prompt=first_prompt,
        critique_prompt=critique_prompt,
        first_prompt_len=len(first_ids),
        critique_prompt_len=len(critique_ids),
        first_answer=first_answer,
        critique_answer=handle.tokenizer.decode(r2_ids, skip_special_tokens=True).strip(),
        first_ids=[int(i) for i in r1_ids],
        critique_ids=[int(i) for i in r2_ids],
        first_tokens=handle.decode_tokens(r1_ids),
        critique_tokens=handle.decode_tokens(r2_ids),
        first_finish=r1_finish,
        critique_finish=r2_finish,
        first_top_logp=r1_top,
        critique_top_logp=r2_top,
        first_entropy=r1_full,
        critique_entropy=r2_full,
        top_k=settings.top_k,
        timings={"first_s": t1 - t0, "critique_s": t2 - t1, "total_s": t2 - t0},
    )
