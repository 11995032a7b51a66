"""Validated inputs and both paths' prompts (docs/architecture.md, "The dual-path protocol").

The retrieval prompt is the chosen template with the context; the parametric prompt is the same template
without it (:mod:`core.model.prompts` holds the templates). Inputs are cleaned of control characters, checked
for emptiness and against the model's token budget here, before any model call; nothing is ever silently
truncated.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.engine.settings import DualPathSettings
from core.model.handle import ModelHandle
from core.model.prompts import (
    build_prompt,
    clean_inputs,
    encode_prompt,
    neutralize_special_tokens,
    resolve_template,
    special_token_warning,
)


@dataclass(frozen=True)
class Prompt:
    """One path's prompt: its text and its ``len(ids)`` token ids."""

    prompt: str
    ids: list[int]


@dataclass(frozen=True)
class PreparedPrompts:
    """Validated inputs and both paths' prompts (``retrieval`` with the context, ``parametric`` without).

    Attributes:
        query, context: the cleaned, stripped inputs.
        template_key: the resolved template (never ``"auto"``).
        retrieval, parametric: each path's :class:`Prompt`.
        warnings: plain sentences about what cleaning changed.
    """

    query: str
    context: str
    template_key: str
    retrieval: Prompt
    parametric: Prompt
    warnings: tuple[str, ...]


def prepare_prompts(handle: ModelHandle, query: str, context: str, settings: DualPathSettings) -> PreparedPrompts:
    """Validate the inputs and build both prompts (no model call: only the tokenizer is used).

    Raises:
        ValueError: invalid settings, empty query or context, or a prompt that does not fit the model's token
            budget (the message gives the limit and the overshoot).
    """
    settings.validate()
    query, context, removed = clean_inputs(query, context)
    warnings: list[str] = []
    if removed:
        warnings.append(f"Removed {removed} control character(s) from the input (newlines and tabs are kept).")
    query, found_q = neutralize_special_tokens(query, handle.tokenizer)
    context, found_c = neutralize_special_tokens(context, handle.tokenizer)
    if found_q or found_c:
        warnings.append(special_token_warning(found_q + found_c))
    if not context:
        raise ValueError(
            "The context is empty: with no context both paths are the same prompt and Z is 0 by construction. "
            "Paste the retrieved passage."
        )
    template = resolve_template(settings.template, handle.tokenizer)
    retrieval_text = build_prompt(template, handle.tokenizer, query, context)
    parametric_text = build_prompt(template, handle.tokenizer, query, None)
    retrieval_ids = encode_prompt(template, handle.tokenizer, retrieval_text)
    parametric_ids = encode_prompt(template, handle.tokenizer, parametric_text)
    budget = handle.info.max_tokens
    needed = len(retrieval_ids) + settings.max_new_tokens
    if needed > budget:
        raise ValueError(
            f"Too long for this model: the retrieval prompt is {len(retrieval_ids):,} tokens and the answer may "
            f"take {settings.max_new_tokens} more, {needed:,} in all, over the limit of {budget:,} tokens. Shorten "
            f"the context by at least {needed - budget:,} tokens (nothing is cut automatically)."
        )
    return PreparedPrompts(
        query,
        context,
        template.key,
        Prompt(retrieval_text, retrieval_ids),
        Prompt(parametric_text, parametric_ids),
        tuple(warnings),
    )
