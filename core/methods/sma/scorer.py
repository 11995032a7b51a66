"""SMA's language-model side: greedy answers to (perturbed) prompts, scored with the response score of eq. 14.

Every generation goes through :func:`core.engine.generation.generate_greedy`, which runs the model through
the handle (one ``handle.generate`` per batch); nothing here takes the model's lock itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from core.engine import DualPathSettings, generate_greedy
from core.methods.sma.maths import response_score
from core.methods.sma.results import Sample
from core.methods.sma.settings import SMASettings
from core.model.embedder import embed
from core.model.handle import ModelHandle
from core.model.prompts import encode_prompt

AnswerFn = Callable[[list[list[int]], DualPathSettings], list[tuple[str, int]]]
"""``answer_fn(prompt_ids_batch, settings)``: :func:`greedy_answers` on a handle, or a stand-in that gets the same
answers elsewhere (:mod:`core.scale.ray_sma` computes them on Ray actors)."""


def greedy_answers(handle: ModelHandle, prompts: list[list[int]], settings: DualPathSettings) -> list[tuple[str, int]]:
    """Greedy answers to a left-padded batch of prompt ids.

    Returns:
        One ``(answer text, Len in tokens)`` per prompt: the text decoded without special tokens and
        stripped; Len counts the answer's tokens without a final end-of-sequence token.
    """
    eos = set(handle.eos_token_ids)
    out = []
    for tokens, _logits, _finish in generate_greedy(handle, prompts, settings):
        n = len(tokens) - (1 if tokens and tokens[-1] in eos else 0)
        out.append((handle.tokenizer.decode(tokens, skip_special_tokens=True).strip(), n))
    return out


class ResponseScorer:
    """Generates the answers of perturbed prompts (batched, cached by prompt ids) and scores them with eq. 14.

    Called by captum as ``scorer(prompts, masks) -> scores`` (:data:`core.methods.sma.attribution.ScoreFn`);
    every scored sample is kept in :attr:`samples`.

    Args:
        handle: the shared model.
        template: the resolved prompt template.
        settings: the run's settings (γ₁, γ₂, reference, batch size, answer length).
        units, baselines: the run's unit texts and their perturbed forms (for ``reference="input"``).
        reference_answer: ŷ, the answer to the unperturbed prompt.
        reference_tokens: Len(ŷ) in tokens.
        on_generation: called with the number of prompts after every scored batch.
        answer_fn: how a batch of prompt ids gets its answers (default: :func:`greedy_answers` on ``handle``).
    """

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
        answer_fn: AnswerFn | None = None,
    ) -> None:
        self.handle = handle
        self.answer_fn = answer_fn or partial(greedy_answers, handle)
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
        for start in range(0, len(todo), self.settings.batch_size):
            batch = todo[start : start + self.settings.batch_size]
            for key, answer in zip(batch, self.answer_fn([list(b) for b in batch], self.gen_settings)):
                self.cache[key] = answer
        return [self.cache[i] for i in ids]

    def perturbed_text(self, mask: Sequence[int]) -> str:
        """x̃⁽ⁱ⁾: the units with every masked one replaced by its baseline."""
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
            a, b = emb[: len(texts)].astype(np.float64), emb[len(texts) :].astype(np.float64)
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
