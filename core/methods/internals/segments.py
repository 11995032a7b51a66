"""Token segments of a forward sequence: which tokens are template, context, query or answer.

The attention views measure how much of each query row's attention lands on each segment (e.g. the share the
answer puts on the context).
"""

from __future__ import annotations

import logging

from core.engine.prepare import PreparedPrompts
from core.engine.result import PARAMETRIC, PATHS, RETRIEVAL
from core.model.handle import ModelHandle
from core.model.prompts import TEMPLATES

logger = logging.getLogger(__name__)

SEGMENTS: tuple[str, ...] = ("template", "context", "query", "answer")
"""Token segments of a forward sequence: the template's own text and special tokens, the context, the
query, and the answer tokens fed back in (teacher forcing)."""
TEMPLATE, CONTEXT, QUERY, ANSWER = range(len(SEGMENTS))


def prompt_segments(handle: ModelHandle, prepared: PreparedPrompts, path: str) -> list[int]:
    """The segment (index into :data:`SEGMENTS`) of every token of one path's prompt.

    Tokens whose characters overlap the context (retrieval prompt only) are ``context``, those overlapping
    the query are ``query``, everything else (template words, role markers, special tokens) ``template``.
    Uses the tokenizer's offset mapping; without one, every token is ``template`` (and a warning is logged).

    Args:
        handle: the model whose tokenizer built the prompts.
        prepared: both prompts of a run (:func:`core.engine.prepare.prepare_prompts`).
        path: ``"retrieval"`` or ``"parametric"``.

    Returns:
        One segment index per prompt token (``len(prepared.<path>.ids)``).
    """
    if path not in PATHS:
        raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {path!r}")
    prompt = prepared.retrieval if path == RETRIEVAL else prepared.parametric
    text, ids = prompt.prompt, prompt.ids
    chat = TEMPLATES[prepared.template_key].chat
    spans: list[tuple[int, int, int]] = []
    start = 0
    if path == RETRIEVAL:
        c0 = text.find(prepared.context)
        if c0 >= 0:
            spans.append((c0, c0 + len(prepared.context), CONTEXT))
            start = c0 + len(prepared.context)
    q0 = text.find(prepared.query, start)
    if q0 < 0:
        q0 = text.find(prepared.query)
    if q0 >= 0:
        spans.append((q0, q0 + len(prepared.query), QUERY))
    try:
        enc = handle.tokenizer(text, add_special_tokens=not chat, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if list(enc["input_ids"]) != list(ids):
            raise ValueError("offsets tokenization differs")
    except (NotImplementedError, ValueError, KeyError, TypeError):
        logger.warning("No usable offset mapping for this tokenizer: attention mass per segment is unavailable")
        return [TEMPLATE] * len(ids)
    out = []
    for s, e in offsets:
        label = TEMPLATE
        if e > s:
            for a, b, seg in spans:
                if s < b and e > a:
                    label = seg
                    break
        out.append(label)
    return out
