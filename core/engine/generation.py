"""The engine's model calls: greedy generation (optionally streamed) and teacher-forced forward passes.

* :func:`generate_greedy` — one batched greedy ``generate(output_logits=True)`` over left-padded prompts; each
  answer's next-token distributions are the generation's own raw logits, not a second pass (docs/architecture.md,
  "The dual-path protocol").
* :func:`teacher_forced_logits_batch` — one forward pass over B left-padded rows ``prompt + answer[:-1]``
  (:func:`core.model.trace.trace`, which pads, passes ``position_ids`` and keeps only the answer's logits):
  row t predicts ``answer[t]``; :func:`teacher_forced_logits` is its batch of one, :func:`teacher_forced_pass`
  also keeps each row's state at its prompt's last token.

Every call goes through the handle (:meth:`ModelHandle.generate` / :meth:`ModelHandle.forward`), which holds
the model's lock and ``torch.inference_mode()``. Padding is built by hand (the tokenizer is never touched):
``generate`` derives ``position_ids = cumsum(mask) − 1`` from the attention mask itself (transformers 5
``_prepare_position_ids_for_generation``), but a plain ``model(...)`` call does **not** (``LlamaModel.forward``
falls back to ``arange``), so the trace behind the teacher-forced pass passes them explicitly.

Every generation carries :class:`CancelCriteria`, which checks the run's cancel token
(:func:`core.model.handle.run_control`) at every generated token: a cancelled run stops within one token and
the handle releases the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from core.engine.settings import DualPathSettings
from core.engine.turns import TURN, TurnStop, answer_end, turn_pattern, turn_start
from core.model.handle import ModelHandle, check_cancelled, report_step
from core.model.trace import left_pad, trace

SCORING = "scoring"
"""The :attr:`StreamEvent.path` of the scoring step that follows generation."""


@dataclass(frozen=True)
class StreamEvent:
    """Progress of one path: the answer so far, how many tokens, and whether it is finished.

    Attributes:
        path: ``"retrieval"``, ``"parametric"``, :data:`SCORING`, or ``"row<i>"`` for unnamed batch rows.
    """

    path: str
    text: str
    n_tokens: int
    max_tokens: int
    done: bool


EventCallback = Callable[[StreamEvent], None]


class _RowStreamer(BaseStreamer):
    """Receives each generation step's tokens for every batch row and reports them per path."""

    def __init__(
        self,
        handle: ModelHandle,
        paths: list[str],
        max_tokens: int,
        callback: EventCallback,
        turns: re.Pattern[str] | None = None,
    ) -> None:
        self.handle = handle
        self.turns = turns
        self.paths = paths
        self.max_tokens = max_tokens
        self.callback = callback
        self.ids: list[list[int]] = [[] for _ in paths]
        self.done = [False] * len(paths)
        self._prompt_seen = False
        self._eos = set(handle.eos_token_ids)

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first hands over the prompt itself
            self._prompt_seen = True
            return
        step = value.reshape(len(self.paths), -1)[:, -1].tolist()
        for row, token in enumerate(step):
            if self.done[row]:
                continue
            self.ids[row].append(int(token))
            text = self._text(row)
            turn = turn_start(self.turns, text)
            finished = int(token) in self._eos or len(self.ids[row]) >= self.max_tokens or turn is not None
            self.done[row] = finished
            self._emit(row, finished, text[:turn].rstrip() if turn is not None else text)

    def _text(self, row: int) -> str:
        return self.handle.tokenizer.decode(self.ids[row], skip_special_tokens=True).rstrip("\ufffd")  # whole chars

    def _emit(self, row: int, done: bool, text: str | None = None) -> None:
        text = self._text(row) if text is None else text
        self.callback(StreamEvent(self.paths[row], text, len(self.ids[row]), self.max_tokens, done))

    def end(self) -> None:
        for row in range(len(self.paths)):
            if not self.done[row]:
                self.done[row] = True
                self._emit(row, True)


class CancelCriteria(StoppingCriteria):
    """A stopping criterion that never stops a row but raises when the run is cancelled.

    Called by ``generate`` after every step; it calls :func:`core.model.handle.check_cancelled`, which raises
    :class:`~core.model.handle.RunCancelled` (or the app's own stop exception) once the run's token is
    cancelled, then :func:`core.model.handle.report_step` (per-token progress of a batched run). Outside
    :func:`~core.model.handle.run_control` and :func:`~core.model.handle.on_each_step` blocks it costs two
    context-variable lookups.
    """

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        check_cancelled()
        report_step()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def cancellable(*more: StoppingCriteria) -> StoppingCriteriaList:
    """The stopping criteria every generation of the app passes: :class:`CancelCriteria`, then ``more``."""
    return StoppingCriteriaList([CancelCriteria(), *more])


def _generation_config(handle: ModelHandle, settings: DualPathSettings) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=settings.max_new_tokens,
        min_new_tokens=settings.max_new_tokens if settings.force_length else None,
        do_sample=False,
        num_beams=1,
        temperature=None,
        top_p=None,
        top_k=None,
        eos_token_id=handle.eos_token_ids or None,
        pad_token_id=handle.pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
    )


def generate_greedy(
    handle: ModelHandle,
    prompts: list[list[int]],
    settings: DualPathSettings,
    *,
    paths: list[str] | None = None,
    on_event: EventCallback | None = None,
) -> list[tuple[list[int], torch.Tensor, str]]:
    """Greedy answers for a left-padded batch of prompts, with the raw logits of every step.

    Args:
        prompts: B prompt id lists (each non-empty).
        paths: a name per prompt for the :class:`StreamEvent` of ``on_event`` (default ``row0``, ``row1`` …).
        on_event: called after every generated token of every row.

    Returns:
        One ``(token_ids, logits, finish)`` per prompt: the answer's ids up to and including the first EOS,
        or, under a plain template, up to the line where the model begins a turn of its own
        (:mod:`core.engine.turns`); its logits of shape ``(n, V)`` (model dtype, on the model's device; one
        tensor per prompt, sharing no memory with the others) where row t is the distribution that produced
        ``token_ids[t]``; and ``"eos"``, ``"turn"`` or ``"length"``.

    Raises:
        ValueError: no prompt, or an empty one.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    input_ids, mask, _ = left_pad(prompts, handle.pad_token_id)
    width = input_ids.shape[1]
    turns = turn_pattern(settings.template, handle.tokenizer, force_length=settings.force_length)
    streamer = None
    if on_event is not None:
        names = paths or [f"row{i}" for i in range(len(prompts))]
        streamer = _RowStreamer(handle, names, settings.max_new_tokens, on_event, turns)
    stops = (TurnStop(handle.tokenizer, turns, width),) if turns is not None else ()
    out = handle.generate(
        input_ids=input_ids.to(handle.device),
        attention_mask=mask.to(handle.device),
        generation_config=_generation_config(handle, settings),
        streamer=streamer,
        stopping_criteria=cancellable(*stops),
    )
    new = out.sequences[:, width:].tolist()
    steps: list[torch.Tensor | None] = list(out.logits)  # one (batch, V) tensor per step
    first = out.logits[0]
    del out  # the steps are now held by this list alone, which releases them one by one below
    answers = [_answer(handle, ids, settings, turns) for ids in new]
    # Each row's logits go into a tensor of its own, filled step by step while the steps are released: the
    # (batch, steps, V) logits are never held twice (as steps and as a stacked copy), a row that stopped early
    # keeps only its own n steps, and a caller can free a row's logits as soon as the row is scored.
    row_logits = [first.new_empty((len(ids), first.shape[-1])) for ids, _ in answers]
    del first
    for t in range(len(steps)):
        step, steps[t] = steps[t], None
        for row, (ids, _) in enumerate(answers):
            if t < len(ids):
                row_logits[row][t] = step[row]  # type: ignore[index]
        del step
    return [(ids, logits, finish) for (ids, finish), logits in zip(answers, row_logits, strict=True)]


def _answer(
    handle: ModelHandle, ids: list[int], settings: DualPathSettings, turns: re.Pattern[str] | None
) -> tuple[list[int], str]:
    """A generated row's answer and why it ended: at its first EOS, at the model's own turn, or at the cap."""
    n, finish = len(ids), "length"
    if not settings.force_length:
        eos = set(handle.eos_token_ids)
        n, finish = next(((i + 1, "eos") for i, tok in enumerate(ids) if tok in eos), (n, finish))
    end = answer_end(handle.tokenizer, turns, ids[: n - 1] if finish == "eos" else ids[:n])
    if end is not None:
        n, finish = end, TURN
    return ids[:n], finish


def teacher_forced_logits(handle: ModelHandle, prompt_ids: list[int], answer_ids: list[int]) -> torch.Tensor:
    """One forward pass over prompt + answer; returns the logits that predict each answer token.

    Returns:
        ``(len(answer_ids), V)``: row t is the distribution over ``answer_ids[t]`` given
        ``prompt + answer[:t]``. Only those rows are materialized (``logits_to_keep``).

    Raises:
        ValueError: an empty answer.
    """
    if len(answer_ids) == 0:
        raise ValueError("answer_ids is empty")
    return teacher_forced_logits_batch(handle, [prompt_ids], [answer_ids])[0]


def teacher_forced_logits_batch(
    handle: ModelHandle, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]
) -> list[torch.Tensor]:
    """Batched :func:`teacher_forced_logits`: one left-padded forward over ``prompt + answer[:-1]``.

    Args:
        prompts: B prompt id lists (each non-empty).
        answers: B answer id lists (each non-empty).

    Returns:
        B tensors; tensor ``i`` has shape ``(len(answers[i]), V)`` and row t is the distribution over
        ``answers[i][t]`` given ``prompts[i] + answers[i][:t]``. Left padding aligns every row's end, so the
        last ``len(answers[i])`` positions of row ``i`` are its answer predictions; only the last
        ``max len(answer)`` positions are materialized (``logits_to_keep``).

    Raises:
        ValueError: different numbers of prompts and answers, none, or an empty one.
    """
    return teacher_forced_pass(handle, prompts, answers)[0]


def teacher_forced_pass(
    handle: ModelHandle,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[Sequence[int]],
    *,
    prompt_states: bool = False,
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """:func:`teacher_forced_logits_batch`, and with ``prompt_states`` each row's residual stream at its prompt's
    last token (``(n_layers + 1, d)`` float32, CPU; the pass is causal, so it is the state a forward over the
    prompt alone ends in): what CRM reads as h_ℓ^0 on the parametric path, kept at no extra forward.

    Raises:
        ValueError: different numbers of prompts and answers, none, or an empty one.
    """
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(f"need as many prompts as answers (got {len(prompts)} and {len(answers)})")
    if any(len(p) == 0 for p in prompts) or any(len(a) == 0 for a in answers):
        raise ValueError("every prompt and every answer needs at least one token")
    rows = [list(p) + list(a[:-1]) for p, a in zip(prompts, answers)]
    positions = [[len(p) - 1] for p in prompts] if prompt_states else None
    t = trace(handle, rows, residual=prompt_states, positions=positions, logits=max(len(a) for a in answers))
    logits = t.logits
    states = [r[:, 0] for r in t.residual] if prompt_states else None
    return [logits[i, logits.shape[1] - len(a) :] for i, a in enumerate(answers)], states
