"""The user-visible settings of an SMA run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from core.methods.sma.attribution import METHODS
from core.methods.sma.units import GRANULARITIES, PERTURBATIONS
from core.model.prompts import TEMPLATE_CHOICES

SCOPES = ("query", "query+context")
REFERENCES = ("answer", "input")


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
        fit_intercept: add an (unpenalized) intercept to the ridge fit; ``False`` = eq. 16 as printed.
        reference: ``"answer"`` — Len and Sim against the unperturbed answer ŷ (§IV-E) — or ``"input"`` —
            against the perturbed input text x̃⁽ⁱ⁾ (eq. 14 as printed).
        max_new_tokens: most tokens of every (perturbed) answer.
        template: prompt template key (as in :class:`core.engine.settings.DualPathSettings`).
        seed: seed of the masks (Lime) and permutations (Shapley); local to the run, so the same seed gives
            the same result whatever else runs in the process.
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
        """Raise ``ValueError`` naming the first setting out of range."""
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
