"""The one result object that flows from the engine to the detectors, the pages and the CLI."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

SCHEMA_VERSION = 1

# Array fields and their dtypes; everything else is a plain JSON value.
_ARRAYS: dict[str, Any] = {
    "token_kl": np.float32,
    "entropy_rag": np.float32,
    "entropy_para": np.float32,
    "logprob_rag": np.float32,
    "logprob_para": np.float32,
    "topk_ids_rag": np.int64,
    "topk_ids_para": np.int64,
    "topk_probs_rag": np.float32,
    "topk_probs_para": np.float32,
}


@dataclass
class DualPathResult:
    """Everything one dual-path run produced, as CPU numpy arrays and strings.

    Positions ``t = 0 … n−1`` index the retrieval answer's tokens. At position ``t`` both paths predict
    ``answer_token_ids[t]``: the retrieval path from its own generation (query + context + answer[:t]), the
    parametric path teacher-forced on the same prefix without the context (query + answer[:t]).

    Attributes (arrays have shape ``(n,)`` unless noted; units nats):
        token_kl: KL_t = KL(P_rag,t ‖ P_para,t) over the full vocabulary.
        entropy_rag, entropy_para: entropy of each path's next-token distribution.
        logprob_rag, logprob_para: log-probability of the answer token ``t`` on each path.
        topk_ids_*, topk_probs_*: shape ``(n, k)``, the top-k candidates of each path.
        repcs_score: Z = Σ_{t < T} KL_t over the first ``score_window`` (T) positions (RePCS eq. 2).
        threshold: τ in force (Z < τ ⇒ ``verdict == "memorized"``), ``None`` when no threshold is known.
        kl_stats: the CRM level-2 statistics of ``token_kl[:T]``.
        max_abs_log_ratio: max_t |logprob_rag − logprob_para| over the window (an estimate of RePCS γ).
    """

    model: str
    model_info: dict[str, Any]
    query: str
    context: str
    template: str
    settings: dict[str, Any]
    rag_prompt: str
    parametric_prompt: str
    rag_prompt_len: int
    parametric_prompt_len: int
    rag_answer: str
    parametric_answer: str
    answer_token_ids: list[int]
    answer_tokens: list[str]
    parametric_token_ids: list[int]
    parametric_tokens: list[str]
    rag_finish: str
    parametric_finish: str
    token_kl: np.ndarray
    entropy_rag: np.ndarray
    entropy_para: np.ndarray
    logprob_rag: np.ndarray
    logprob_para: np.ndarray
    topk_ids_rag: np.ndarray
    topk_ids_para: np.ndarray
    topk_probs_rag: np.ndarray
    topk_probs_para: np.ndarray
    topk_tokens_rag: list[list[str]]
    topk_tokens_para: list[list[str]]
    score_window: int
    repcs_score: float
    threshold: float | None
    threshold_source: str
    verdict: str
    kl_stats: dict[str, Any]
    max_abs_log_ratio: float
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def n_tokens(self) -> int:
        return len(self.answer_token_ids)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; float32 values are written exactly, so :meth:`from_dict` is lossless."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = _jsonable(value)
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DualPathResult:
        names = {f.name for f in fields(cls)}
        missing = [n for n in names if n not in data and n not in {"warnings", "timings", "extras", "schema_version"}]
        if missing:
            raise ValueError(f"Not a Read or Recall result: missing keys {sorted(missing)}")
        kwargs = {k: v for k, v in data.items() if k in names}
        for name, dtype in _ARRAYS.items():
            kwargs[name] = np.asarray(kwargs[name], dtype=dtype)
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> DualPathResult:
        return cls.from_dict(json.loads(text))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
