"""ReDeEP's per-token view of one result: ECS (read) against PKS (recall), next to the dual path's KL.

:func:`decompose` runs :func:`core.methods.redeep.forward.redeep_trace` once and reduces it over the chosen
heads and layers; pages draw the :class:`ReDeEPView` it returns (and export its :meth:`ReDeEPView.table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.engine.result import DualPathResult
from core.methods.redeep.choice import ReDeEPChoice
from core.methods.redeep.forward import ReDeEPTrace, redeep_trace
from core.model.handle import ModelHandle


@dataclass
class ReDeEPView:
    """One result's ReDeEP decomposition.

    Attributes:
        trace: every head's ECS and every layer's PKS per answer token.
        choice: the heads and layers in force (with α, β).
        kl: ``(N,)`` the dual path's KL_t of the same tokens (nats).
        ecs: ``(N,)`` mean ECS over the chosen heads; ``pks``: ``(N,)`` mean PKS over the chosen layers (or
            ``None`` when the model gives no PKS).
        score: ``α·ΣPKS − β·ΣECS`` of the row (token means; ``None`` without PKS when layers are chosen).
    """

    trace: ReDeEPTrace
    choice: ReDeEPChoice
    kl: np.ndarray
    ecs: np.ndarray
    pks: np.ndarray | None
    score: float | None

    def table(self) -> list[dict[str, Any]]:
        """One row per answer token: position, token, KL, ECS (chosen heads' mean), PKS (chosen layers' mean),
        and each chosen head's ECS / layer's PKS (the page's table and CSV)."""
        rows = []
        for n, token in enumerate(self.trace.tokens):
            row: dict[str, Any] = {"position": n, "token": token, "kl": float(self.kl[n]), "ecs": float(self.ecs[n])}
            row["pks"] = None if self.pks is None else float(self.pks[n])
            for layer, head in self.choice.heads:
                row[f"ecs_L{layer}.H{head}"] = float(self.trace.ecs[n, layer, head])
            if self.trace.pks is not None:
                for layer in self.choice.layers:
                    row[f"pks_L{layer}"] = float(self.trace.pks[n, layer])
            rows.append(row)
        return rows


def row_means(trace: ReDeEPTrace) -> tuple[np.ndarray, np.ndarray | None]:
    """A row's mean ECS ``(L, H)`` and mean PKS ``(L,)`` over its answer tokens (float64)."""
    ecs = trace.ecs.astype(np.float64).mean(0)
    return ecs, None if trace.pks is None else trace.pks.astype(np.float64).mean(0)


def decompose(handle: ModelHandle, result: DualPathResult, choice: ReDeEPChoice) -> ReDeEPView:
    """ReDeEP's per-token decomposition of ``result`` under ``choice`` (one traced forward; PKS is computed at the
    chosen layers only, the other layers' PKS are NaN)."""
    return view_of(redeep_trace(handle, result, choice.k_percent, layers=choice.layers), choice, result)


def view_of(t: ReDeEPTrace, choice: ReDeEPChoice, result: DualPathResult) -> ReDeEPView:
    """The decomposition of a computed trace under ``choice`` (no model call; ``t`` at ``choice.k_percent``,
    with PKS at least at the chosen layers)."""
    heads_l = [h[0] for h in choice.heads]
    heads_h = [h[1] for h in choice.heads]
    ecs = t.ecs[:, heads_l, heads_h].mean(-1) if choice.heads else np.full(t.n_tokens, np.nan, dtype=np.float32)
    pks = None
    if t.pks is not None:
        pks = t.pks[:, choice.layers].mean(-1) if choice.layers else np.full(t.n_tokens, np.nan, dtype=np.float32)
    mean_ecs, mean_pks = row_means(t)
    score = None if (t.pks is None and choice.layers) else float(choice.score(mean_ecs, mean_pks))
    kl = np.asarray(result.token_kl, dtype=np.float32)[: t.n_tokens]
    return ReDeEPView(trace=t, choice=choice, kl=kl, ecs=ecs, pks=pks, score=score)
