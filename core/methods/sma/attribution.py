"""captum wiring for SMA: ``LLMAttribution`` around ``Lime`` + ridge, ``ShapleyValueSampling`` or
``FeatureAblation``, with SMA's response score as the attributed output.

``captum.attr.LLMAttribution`` wraps a perturbation method and a ``TextTemplateInput`` whose features are the
units: a 0 in the interpretable mask replaces the unit by its baseline (its perturbed form). Out of the box
LLMAttribution attributes log p(fixed target | perturbed prompt); SMA instead regenerates the answer for every
perturbed prompt and scores it with eq. 14. We therefore subclass ``LLMAttribution`` and replace only its
forward function (:func:`make_attribution`): captum still maps masks to prompts, drives the sampling loop
and (for Lime) fits ``SkLearnRidge`` — with a constant similarity kernel, so the fit is the unweighted ridge
of eq. 16 — while the caller's ``score_fn`` generates and returns r⁽ⁱ⁾. captum never runs the language model
here: it only learns the device the masks live on.

Randomness is local to a call, so the same seed gives the same β whatever else runs in the process: Lime
draws its masks from the caller's pre-drawn array (:func:`core.methods.sma.units.draw_masks` with a seeded
``numpy.random.Generator``), and Shapley sampling draws its permutations from a ``torch.Generator`` seeded by
``seed`` (never from torch's process-wide generator). Feature ablation is deterministic.

captum is imported when an attribution is built, not when this module is imported (it adds about half a
second to opening a page that never runs SMA).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

METHODS = ("lime", "shapley", "ablation")
METHOD_LABELS = {
    "lime": "Lime + ridge (the paper: random masks, eq. 16)",
    "shapley": "Shapley value sampling (N permutations)",
    "ablation": "Feature ablation (one unit at a time)",
}

ScoreFn = Callable[[list[str], torch.Tensor], list[float]]
"""``score_fn(prompts, masks) -> scores``: the response score r⁽ⁱ⁾ of each perturbed prompt; ``masks`` is the
``(k, L)`` interpretable mask of the batch (CPU)."""


class _ScoreLabel:
    """The "tokenizer" captum uses to label the attributed output.

    The output here is the single scalar r⁽ⁱ⁾ of eq. 14, not a token sequence, so it is represented by one
    pseudo-token ``"r"`` (id 0). captum only calls ``decode`` and ``__call__`` on it to format
    ``LLMAttributionResult.output_tokens``.
    """

    TEXT = "r"

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return self.TEXT

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        return [0]

    def __call__(self, text: str, **kwargs: Any) -> dict[str, Any]:
        return {"input_ids": [0], "offset_mapping": [(0, len(text))]}


class _DeviceOnly(torch.nn.Module):
    """What captum holds as "the model": only the device the masks go to. SMA generates through the model
    handle inside ``score_fn``; captum never calls this module."""

    def __init__(self, device: torch.device | str) -> None:
        super().__init__()
        self.device = torch.device(device)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise RuntimeError("SMA's captum wrapper scores through score_fn; the stand-in model is never called")


def seeded_permutations(seed: int) -> Callable[[int, int], Iterator[list[int]]]:
    """A permutation generator for ``ShapleyValueSampling`` that draws from its own seeded ``torch.Generator``.

    Args:
        seed: the seed; the same seed gives the same permutations, whatever else uses torch's RNG.

    Returns:
        ``permutations(num_features, num_samples)`` yielding ``num_samples`` permutations of
        ``range(num_features)`` as lists (the same sequence ``torch.manual_seed(seed)`` followed by
        ``torch.randperm`` would give).
    """
    generator = torch.Generator(device="cpu").manual_seed(int(seed))

    def permutations(num_features: int, num_samples: int) -> Iterator[list[int]]:
        for _ in range(num_samples):
            yield torch.randperm(num_features, generator=generator).tolist()

    return permutations


def make_attribution(
    method: str,
    score_fn: ScoreFn,
    *,
    masks: np.ndarray | None = None,
    alpha: float = 1.0,
    fit_intercept: bool = True,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> tuple[Any, Any]:
    """Build the captum attribution object for one run.

    Args:
        method: one of :data:`METHODS`.
        score_fn: see :data:`ScoreFn`.
        masks: the ``(N, L)`` masks Lime must use (in this order); required for Lime.
        alpha, fit_intercept: the ridge of eq. 16 (Lime).
        seed: the seed of Shapley sampling's permutations.
        device: where captum builds its mask tensors (the model's device).

    Returns:
        ``(llm_attribution, interpretable_model_or_None)``; the second is the ridge (Lime only).

    Raises:
        ValueError: unknown method, or Lime without masks.
    """
    from captum._utils.models.linear_model import SkLearnRidge
    from captum.attr import FeatureAblation, Lime, LLMAttribution, ShapleyValueSampling

    class _ResponseScoreAttribution(LLMAttribution):
        """LLMAttribution whose forward function returns SMA's r⁽ⁱ⁾ for each perturbed prompt."""

        def __init__(self, attr_method: Any) -> None:
            super().__init__(attr_method, _ScoreLabel())
            self.include_per_token_attr = False  # one scalar (r) per perturbed input

        def _forward_func(
            self, perturbed_tensor: torch.Tensor | None, inp: Any, *args: Any, **kwargs: Any
        ) -> torch.Tensor:
            rows = inp.to_tensor() if perturbed_tensor is None else perturbed_tensor
            rows = rows.reshape(-1, inp.n_itp_features)
            prompts = [inp.to_model_input(rows[i : i + 1]) for i in range(rows.shape[0])]
            scores = score_fn(prompts, rows.detach().cpu())
            return torch.tensor(scores, dtype=torch.float32, device=rows.device)

    stand_in = _DeviceOnly(device)
    ridge = None
    if method == "lime":
        if masks is None:
            raise ValueError("Lime needs the pre-drawn masks")
        ridge = SkLearnRidge(alpha=float(alpha), fit_intercept=bool(fit_intercept))
        drawn = np.asarray(masks, dtype=np.int64)

        def perturb(original_inp: torch.Tensor, **kwargs: Any) -> Iterator[torch.Tensor]:
            for row in drawn:  # a generator: captum draws from it in order
                yield torch.as_tensor(row[None, :], dtype=torch.long, device=original_inp.device)

        def constant_kernel(*args: Any, **kwargs: Any) -> float:
            return 1.0  # unweighted least squares: eq. 16 has no LIME similarity kernel

        attr_method = Lime(stand_in, interpretable_model=ridge, similarity_func=constant_kernel, perturb_func=perturb)
    elif method == "shapley":
        attr_method = ShapleyValueSampling(stand_in)
        attr_method.permutation_generator = seeded_permutations(seed)
    elif method == "ablation":
        attr_method = FeatureAblation(stand_in)
    else:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    return _ResponseScoreAttribution(attr_method), ridge


def run_captum(
    method: str,
    units: list[str],
    baselines: list[str],
    build_prompt_fn: Callable[[list[str]], str],
    score_fn: ScoreFn,
    *,
    n_samples: int,
    masks: np.ndarray | None = None,
    alpha: float = 1.0,
    fit_intercept: bool = True,
    batch_size: int = 8,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> tuple[np.ndarray, float | None]:
    """Attribute ``score_fn`` to ``units`` with captum.

    Args:
        method: one of :data:`METHODS`.
        units: the unit texts, length L.
        baselines: the text that replaces each masked unit, length L.
        build_prompt_fn: ``build_prompt_fn(values)`` turns the (perturbed) unit strings into the model
            prompt; captum's ``TextTemplateInput`` swaps a masked unit for its baseline before calling it.
        score_fn: see :data:`ScoreFn`.
        n_samples: N — permutations for Shapley sampling (Lime uses ``masks``' rows; ablation ignores it).
        masks: ``(N, L)`` Lime's masks.
        alpha, fit_intercept: the ridge of eq. 16 (Lime).
        batch_size: perturbed prompts handed to ``score_fn`` together.
        seed: Shapley sampling's permutations (a local generator: see the module docstring).
        device: the model's device (captum's mask tensors live there).

    Returns:
        ``(β, intercept)``: β of shape ``(L,)`` float64; the ridge intercept with Lime and
        ``fit_intercept``, else ``None``.

    Raises:
        ValueError: no units, a baseline count that differs, an unknown method, or Lime without masks.
    """
    from captum.attr import TextTemplateInput

    if len(units) != len(baselines) or not units:
        raise ValueError("need at least one unit and one baseline per unit")
    inp = TextTemplateInput(
        template=lambda *values: build_prompt_fn(list(values)), values=list(units), baselines=list(baselines)
    )
    attribution, ridge = make_attribution(
        method, score_fn, masks=masks, alpha=alpha, fit_intercept=fit_intercept, seed=seed, device=device
    )
    target = torch.tensor([0], dtype=torch.long)  # the pseudo-token "r": see _ScoreLabel
    kwargs: dict[str, Any] = {"perturbations_per_eval": max(1, int(batch_size))}
    if method == "lime":
        kwargs["n_samples"] = int(masks.shape[0]) if masks is not None else int(n_samples)
    elif method == "shapley":
        kwargs["n_samples"] = int(n_samples)
    result = attribution.attribute(inp, target=target, **kwargs)
    beta = result.seq_attr.detach().cpu().numpy().astype(np.float64).reshape(-1)
    intercept = None
    if ridge is not None and fit_intercept:
        bias = ridge.bias()
        intercept = None if bias is None else float(bias.reshape(-1)[0])
    return beta, intercept
