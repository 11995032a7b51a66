"""CRM level 1: how far apart the two paths' answers are in meaning (CRM eq. 3)."""

from __future__ import annotations

from core.model.embedder import cosine


def semantic_delta(answer_without: str, answer_with: str) -> float:
    """Δ_seq = 1 − cos(enc(y_0), enc(y_c)) with the offline sentence embedder (in [0, 2]).

    Args:
        answer_without: the parametric path's answer y_0.
        answer_with: the retrieval path's answer y_c.
    """
    return 1.0 - cosine(answer_without, answer_with)
