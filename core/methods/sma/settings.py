"""The user-visible settings of an SMA run: each field's default, bounds, words and CLI flag defined once.

As :class:`core.engine.settings.DualPathSettings` does, every field of :class:`SMASettings` carries one
:class:`~core.engine.settings.Setting` in its metadata (:func:`sma_setting_specs`): :meth:`SMASettings.validate`
checks it, ``detect``'s ``--sma-*`` flags (:func:`core.cli.commands.detect.add_sma_args`) and the Source
attribution page's form (:mod:`components.sma_controls`) are built from it, and the SMA detector and its time
estimate take the defaults from it (:mod:`core.detectors.sma`). Public mode may lower a widget's maximum further,
never raise it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from core.engine.settings import Setting, setting
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

    n_samples: int = setting(
        64,
        Setting(
            "N — random masks (Shapley: permutations)",
            "random masks (Lime) or permutations (Shapley); the paper finds accuracy stable from about 60–80",
            low=1,
            high=4096,
            step=8,
            unit="masks",
            flag="--sma-samples",
        ),
    )
    granularity: str = setting(
        "word",
        Setting(
            "Units",
            "the attribution units — token: the model's own tokens; word: whitespace-separated (the paper); "
            "sentence: for long inputs",
            choices=GRANULARITIES,
            flag="--sma-granularity",
        ),
    )
    method: str = setting(
        "lime",
        Setting(
            "Attribution method (captum)",
            "the captum method: lime + ridge (the paper), shapley sampling or feature ablation",
            choices=METHODS,
            flag="--sma-method",
        ),
    )
    perturbation: str = setting(
        "unicode",
        Setting(
            "A masked unit is",
            "unicode: letters replaced by look-alikes (the paper); remove: the unit is deleted",
            choices=PERTURBATIONS,
        ),
    )
    scope: str = setting(
        "query",
        Setting(
            "Perturb",
            "perturb the query only (the paper) or the context too",
            choices=SCOPES,
            flag="--sma-scope",
        ),
    )
    gamma_length: float = setting(
        0.5, Setting("γ₁ (length ratio)", "γ₁ of eq. 14 (the paper gives no value)", low=0.0, high=10.0, step=0.1)
    )
    gamma_similarity: float = setting(
        0.5,
        Setting("γ₂ (semantic similarity)", "γ₂ of eq. 14 (the paper gives no value)", low=0.0, high=10.0, step=0.1),
    )
    alpha: float = setting(
        1.0, Setting("Ridge α", "the ridge coefficient α of eq. 16", low=0.001, high=1000.0, step=0.5)
    )
    fit_intercept: bool = setting(
        True,
        Setting(
            "Fit an intercept",
            "eq. 16 as printed has none; without one every β also carries a share of the mean response",
        ),
    )
    reference: str = setting(
        "answer",
        Setting(
            "Response score compares the new answer with",
            "answer: the unperturbed answer ŷ (§IV-E); input: the perturbed input x̃ (eq. 14 as printed)",
            choices=REFERENCES,
        ),
    )
    max_new_tokens: int = setting(
        32,
        Setting(
            "Max new tokens per answer",
            "tokens per perturbed answer: every perturbed input is answered again, so keep this short",
            low=1,
            high=1024,
            step=4,
            unit="tokens",
            flag="--sma-max-new-tokens",
        ),
    )
    template: str = setting(
        "auto", Setting("Template", "the prompt template (the sidebar's)", choices=tuple(TEMPLATE_CHOICES))
    )
    seed: int = setting(0, Setting("Seed", "the seed of the masks and permutations", low=0, high=2**31 - 1))
    batch_size: int = setting(
        8, Setting("Batch size", "perturbed prompts generated together", low=1, high=256, widget=None)
    )

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first setting out of its bounds or choices (:func:`sma_setting_specs`)."""
        for name in ("gamma_length", "gamma_similarity", "alpha"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
        for name, spec in sma_setting_specs().items():
            spec.check(name, getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def generations(self, n_units: int) -> int:
        """Generations one run needs for ``n_units`` units (not counting the unperturbed answer)."""
        if self.method == "lime":
            return self.n_samples
        if self.method == "shapley":
            return 1 + self.n_samples * n_units
        return 1 + n_units


def sma_setting_specs() -> dict[str, Setting]:
    """``{field name: its Setting}`` of :class:`SMASettings`, in field order: the one definition of every SMA
    setting's default, bounds, words and flag."""
    return {f.name: f.metadata["setting"] for f in fields(SMASettings) if "setting" in f.metadata}
