"""The internals of one dual-path result: both paths' instrumented forwards and their logit lens.

:func:`analyze` runs one instrumented forward per path over ``prompt + answer[:-1]``
(:mod:`core.methods.internals.forward`) and the logit lens of both (:mod:`core.methods.internals.lens`), and
returns an :class:`Internals`: per path a :class:`PathInternals`, plus the displacement and the lens
comparison. Positions follow the engine's convention (see :mod:`core.methods.internals.replay`): position 0 is
the last prompt token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.engine.result import PARAMETRIC, PATHS, RETRIEVAL, DualPathResult
from core.methods.internals.attention import RADAR_TAU, attention_specialization, specialized_heads
from core.methods.internals.forward import ForwardCapture, instrumented_forward
from core.methods.internals.lens import LensComparison, logit_lens_compare
from core.methods.internals.replay import prepared_for
from core.methods.internals.segments import ANSWER, SEGMENTS, prompt_segments
from core.model.handle import ModelHandle
from core.model.progress import Progress

LENS_TOP_K = 10
"""Logit-lens candidates kept per layer and position by the internals views (the pages' and the notebook API's)."""


@dataclass
class PathInternals:
    """What one path's instrumented forward kept (CPU numpy). ``L`` layers, ``H`` heads, ``P`` answer
    positions, ``S`` segments, ``T`` tokens of the forward sequence (prompt + answer[:-1]).

    Attributes:
        prompt_len: the prompt's length (the sequence continues with answer[:-1]).
        tokens: the ``T`` tokens of the sequence (for pattern axes).
        segments: ``(T,)`` int8 segment of each token (index into :data:`SEGMENTS`).
        entropy: ``(L, H, T)`` float32 attention entropy of every query row (nats).
        mass: ``(L, H, P, S)`` float32 attention mass of the answer positions' rows on each segment.
        hidden_norm: ``(L + 1, P)`` float32 ‖h_ℓ‖ at the answer positions.
    """

    prompt_len: int
    tokens: list[str]
    segments: np.ndarray
    entropy: np.ndarray
    mass: np.ndarray
    hidden_norm: np.ndarray


@dataclass
class Internals:
    """Internals of both paths of one :class:`~core.engine.result.DualPathResult` (CPU numpy and strings).

    ``L`` decoder layers, ``H`` heads, ``P = max(1, n)`` answer positions (position t predicts answer token
    t; t = 0 is the last prompt token).

    Attributes:
        retrieval, parametric: each path's :class:`PathInternals`.
        displacement: ``(L + 1, P, d)`` float32 d_ℓ(t) = h_ℓ(retrieval)[t] − h_ℓ(parametric)[t].
        lens: the logit lens of both paths with the answer tokens as targets.
        lens_tokens: the decoded text of every token id in the lens top-k.
    """

    model: str
    n_layers: int
    n_heads: int
    hidden_size: int
    answer_tokens: list[str]
    answer_token_ids: list[int]
    retrieval: PathInternals
    parametric: PathInternals
    displacement: np.ndarray
    lens: LensComparison
    lens_tokens: dict[int, str] = field(default_factory=dict)

    @property
    def n_positions(self) -> int:
        return int(self.displacement.shape[1])

    @property
    def disp_norm(self) -> np.ndarray:
        """``(L + 1, P)`` the paper's magnitude baseline ‖d_ℓ(t)‖₂ (CRM appendix E), float64."""
        return np.linalg.norm(self.displacement.astype(np.float64), axis=-1)

    def path(self, name: str) -> PathInternals:
        """``retrieval`` or ``parametric``."""
        if name not in PATHS:
            raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {name!r}")
        return self.retrieval if name == RETRIEVAL else self.parametric

    def rows(self, path: str) -> np.ndarray:
        """Query rows of the answer positions in one path's sequence (row of t = prompt_len − 1 + t)."""
        return self.path(path).prompt_len - 1 + np.arange(self.n_positions)

    def entropy_at(self, path: str, where: int | str = 0) -> np.ndarray:
        """``(L, H)`` attention entropy at answer position ``where`` (an int) or ``"mean"`` over the answer."""
        ent = self.path(path).entropy
        rows = self.rows(path)
        if where == "mean":
            return ent[:, :, rows].astype(np.float64).mean(axis=-1)
        t = self._position(where)
        return ent[:, :, rows[t]].astype(np.float64)

    def mass_at(self, path: str, segment: str, where: int | str = 0) -> np.ndarray:
        """``(L, H)`` attention mass on ``segment`` at answer position ``where`` or ``"mean"`` over the answer."""
        if segment not in SEGMENTS:
            raise ValueError(f"segment must be one of {SEGMENTS}, got {segment!r}")
        mass = self.path(path).mass
        s = SEGMENTS.index(segment)
        if where == "mean":
            return mass[:, :, :, s].astype(np.float64).mean(axis=-1)
        return mass[:, :, self._position(where), s].astype(np.float64)

    def _position(self, where: int | str) -> int:
        if isinstance(where, str):
            raise ValueError(f"position must be an int or 'mean', got {where!r}")
        t = int(where)
        if not 0 <= t < self.n_positions:
            raise ValueError(f"answer position must be in [0, {self.n_positions}), got {t}")
        return t

    def lens_token(self, token_id: int) -> str:
        """The decoded text of a token id that appears in the logit-lens top-k."""
        return self.lens_tokens.get(int(token_id), "")

    def lens_topk(self, path: str, t: int = 0, k: int = 5) -> list[list[tuple[str, float]]]:
        """Per hidden-state row, the logit-lens top-``k`` ``(token, probability)`` of one path at position t."""
        lens = self.lens.path(path)
        t = self._position(t)
        ids, probs = lens.topk_ids, lens.topk_probs
        k = min(k, ids.shape[-1])
        return [[(self.lens_token(ids[r, t, j]), float(probs[r, t, j])) for j in range(k)] for r in range(ids.shape[0])]

    def first_divergent_row(self, t: int = 0) -> int | None:
        """The first hidden-state row (0 = emb) whose logit-lens top-1 differs between the paths at ``t``."""
        t = self._position(t)
        top_retrieval = self.lens.retrieval.topk_ids[:, t, 0]
        rows = np.nonzero(top_retrieval != self.lens.parametric.topk_ids[:, t, 0])[0]
        return int(rows[0]) if rows.size else None

    def settled_row(self, t: int = 0) -> int | None:
        """The row from which on (to the last layer) the retrieval path's logit-lens top-1 is answer token t."""
        t = self._position(t)
        if t >= len(self.answer_token_ids):
            return None
        hits = self.lens.retrieval.topk_ids[:, t, 0] == self.answer_token_ids[t]
        row = None
        for r in range(hits.size - 1, -1, -1):
            if not hits[r]:
                break
            row = r
        return row

    def summary(self, tau: float = RADAR_TAU) -> dict[str, Any]:
        """A compact JSON-ready summary (the ``internals`` block of ``python -m core probe --json``).

        Per layer (index 0 = embeddings, ℓ + 1 = decoder layer ℓ) at the last prompt token: ‖d_ℓ‖ and the
        logit-lens KL; the same averaged over the answer positions; per path the attention entropy maps at
        the first answer step and averaged over the answer, the specialized-head counts at ``τ`` and RADAR's
        D.2.1 features, and the attention mass on each segment per layer (mean over heads and answer).
        """
        norms = self.disp_norm
        attention: dict[str, Any] = {"tau": float(tau), "segments": list(SEGMENTS)}
        for path in PATHS:
            first, mean = self.entropy_at(path, 0), self.entropy_at(path, "mean")
            attention[path] = {
                "entropy_first": first.round(6).tolist(),
                "entropy_answer_mean": mean.round(6).tolist(),
                "mean_entropy_per_layer_first": first.mean(axis=1).round(6).tolist(),
                "specialized_heads_first": specialized_heads(first, tau),
                "specialized_heads_answer_mean": specialized_heads(mean, tau),
                "radar_features_answer_mean": attention_specialization(mean, tau),
                "segment_mass_per_layer_answer_mean": {
                    seg: self.mass_at(path, seg, "mean").mean(axis=1).round(6).tolist() for seg in SEGMENTS
                },
            }
        attention[RETRIEVAL]["context_mass_answer_mean"] = self.mass_at(RETRIEVAL, "context", "mean").round(6).tolist()
        return {
            "layers": self.n_layers,
            "heads": self.n_heads,
            "positions": self.n_positions,
            "layer_index": "0 = embeddings, l + 1 = output of decoder layer l",
            "l2_norm": norms[:, 0].round(6).tolist(),
            "l2_norm_answer_mean": norms.mean(axis=1).round(6).tolist(),
            "logit_lens_kl": self.lens.kl[:, 0].astype(np.float64).round(6).tolist(),
            "logit_lens_kl_answer_mean": self.lens.kl.astype(np.float64).mean(axis=1).round(6).tolist(),
            "logit_lens_top1_rag": [self.lens_token(i) for i in self.lens.retrieval.topk_ids[:, 0, 0]],
            "logit_lens_top1_para": [self.lens_token(i) for i in self.lens.parametric.topk_ids[:, 0, 0]],
            "first_row_top1_differs": self.first_divergent_row(0),
            "row_retrieval_top1_settles_on_answer": self.settled_row(0),
            "attention": attention,
        }


def analyze(
    handle: ModelHandle, result: DualPathResult, *, top_k: int = LENS_TOP_K, progress: Progress | None = None
) -> Internals:
    """Run one instrumented forward per path over prompt + answer[:-1] and the logit lens of both.

    Args:
        handle: the model that produced ``result``.
        result: a dual-path result (its prompts are rebuilt with the engine and checked).
        top_k: logit-lens candidates kept per layer and position.
        progress: ``progress(done, total, label)`` after each of the three steps.

    Returns:
        :class:`Internals`; peak extra memory is one layer's ``(H, T, T)`` attention plus
        ``2 × (L + 1) × P × d`` floats of hidden states.

    Raises:
        ValueError: a result of another model, prompts that do not re-tokenize to the result's lengths, or a
            model without attention weights.
    """
    if result.model != handle.info.name:
        raise ValueError(f"This result was produced by {result.model!r}, but the loaded model is {handle.info.name!r}.")
    prepared = prepared_for(handle, result)
    answer = [int(i) for i in result.answer_token_ids]
    n_pos = max(1, len(answer))
    fed = answer[:-1]
    sequences: dict[str, tuple[list[int], list[int], int]] = {}
    for path, prompt in ((RETRIEVAL, prepared.retrieval), (PARAMETRIC, prepared.parametric)):
        segs = prompt_segments(handle, prepared, path) + [ANSWER] * len(fed)
        sequences[path] = (list(prompt.ids) + fed, segs, len(prompt.ids))
    captures: dict[str, ForwardCapture] = {}
    step = 0

    def report(label: str) -> None:
        nonlocal step
        step += 1
        if progress is not None:
            progress(step, 3, label)

    with handle.session():
        for path in PATHS:
            seq, segs, plen = sequences[path]
            rows = [plen - 1 + t for t in range(n_pos)]
            captures[path] = instrumented_forward(
                handle, seq, positions=rows, attention=True, rows=rows, segment_ids=segs
            )
            report(f"{path} path: hidden states and attention")
        lens = logit_lens_compare(
            handle, captures[RETRIEVAL].states, captures[PARAMETRIC].states, targets=answer, top_k=top_k
        )
        report("logit lens")
    unique = np.unique(np.concatenate([lens.retrieval.topk_ids.ravel(), lens.parametric.topk_ids.ravel()]))
    lens_tokens = dict(zip(unique.tolist(), handle.decode_tokens(unique.tolist()), strict=True))

    def path_internals(path: str) -> PathInternals:
        seq, segs, plen = sequences[path]
        capture = captures[path]
        return PathInternals(
            prompt_len=plen,
            tokens=handle.decode_tokens(seq),
            segments=np.asarray(segs, dtype=np.int8),
            entropy=capture.entropy,  # type: ignore[arg-type]
            mass=capture.mass,  # type: ignore[arg-type]
            hidden_norm=np.linalg.norm(capture.states.astype(np.float64), axis=-1).astype(np.float32),
        )

    states = {path: captures[path].states.astype(np.float64) for path in PATHS}
    return Internals(
        model=handle.info.name,
        n_layers=handle.info.n_layers,
        n_heads=handle.info.n_heads,
        hidden_size=handle.info.hidden_size,
        answer_tokens=list(result.answer_tokens),
        answer_token_ids=answer,
        retrieval=path_internals(RETRIEVAL),
        parametric=path_internals(PARAMETRIC),
        displacement=(states[RETRIEVAL] - states[PARAMETRIC]).astype(np.float32),
        lens=lens,
        lens_tokens=lens_tokens,
    )
