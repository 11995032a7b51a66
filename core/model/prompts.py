"""Prompt templates for the two paths.

The retrieval prompt is a template filled with the query and the context; the parametric prompt is the
*same* template with the context segment removed, so the only difference between the two paths is the
context. Templates A–D are the plain templates of the CRM paper (appendix D.1); ``chat`` wraps template A's
body in the tokenizer's chat template. ``auto`` picks ``chat`` when the tokenizer has a chat template.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PromptTemplate:
    """A template with and without its context segment.

    ``with_context`` uses ``{context}`` and ``{query}``; ``without_context`` only ``{query}``.
    """

    key: str
    label: str
    with_context: str
    without_context: str
    chat: bool = False


TEMPLATES: dict[str, PromptTemplate] = {
    "chat": PromptTemplate(
        "chat",
        "Chat template (the model's own), user turn = CRM template A",
        "Context: {context}\n\nQuestion: {query}",
        "Question: {query}",
        chat=True,
    ),
    "A": PromptTemplate(
        "A",
        "A (Standard) — CRM appendix D.1",
        "Context: {context}\n\nQuestion: {query}\n\nAnswer:",
        "Question: {query}\n\nAnswer:",
    ),
    "B": PromptTemplate(
        "B",
        "B (Document) — CRM appendix D.1",
        "Based on the following document, answer the question.\n\nDocument: {context}\n\nQuestion: {query}\n\nAnswer:",
        "Based on the following document, answer the question.\n\nQuestion: {query}\n\nAnswer:",
    ),
    "C": PromptTemplate(
        "C",
        "C (Reference) — CRM appendix D.1",
        "Reference information: {context}\n\nUsing this reference, answer: {query}\n\nAnswer:",
        "Using this reference, answer: {query}\n\nAnswer:",
    ),
    "D": PromptTemplate(
        "D",
        "D (Instruction) — CRM appendix D.1",
        "Read the text below and answer the question.\n\nText: {context}\n\nQuestion: {query}\n\nAnswer:",
        "Read the text below and answer the question.\n\nQuestion: {query}\n\nAnswer:",
    ),
}
TEMPLATE_CHOICES = ("auto", *TEMPLATES)


def resolve_template(key: str, tokenizer: Any) -> PromptTemplate:
    """Return the template for ``key`` (``auto`` → ``chat`` if the tokenizer has one, else ``A``)."""
    if key == "auto":
        key = "chat" if getattr(tokenizer, "chat_template", None) else "A"
    if key not in TEMPLATES:
        raise ValueError(f"Unknown template {key!r}; choose one of {', '.join(TEMPLATE_CHOICES)}.")
    template = TEMPLATES[key]
    if template.chat and not getattr(tokenizer, "chat_template", None):
        raise ValueError("This tokenizer has no chat template; choose a plain template (A–D) or 'auto'.")
    return template


def clean_text(text: str) -> tuple[str, int]:
    """Remove control characters other than newline and tab; keep emoji, right-to-left text, etc.

    Returns:
        The cleaned text and the number of characters removed (so the caller can say so).
    """
    kept = [c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc"]
    return "".join(kept), len(text) - len(kept)


def clean_inputs(query: str, context: str) -> tuple[str, str, int]:
    """The query and context cleaned (:func:`clean_text`) and stripped, and how many characters were removed.

    Each caller has its own rule for an empty context; an empty query is never valid.

    Raises:
        ValueError: a non-text input, or a query that is empty or only whitespace.
    """
    if not isinstance(query, str) or not isinstance(context, str):
        raise ValueError("query and context must be text")
    query, removed_q = clean_text(query)
    context, removed_c = clean_text(context)
    query, context = query.strip(), context.strip()
    if not query:
        raise ValueError("The query is empty. Type a question (whitespace alone does not count).")
    return query, context, removed_q + removed_c


def build_prompt(template: PromptTemplate, tokenizer: Any, query: str, context: str | None) -> str:
    """The prompt string for one path (``context=None`` gives the parametric prompt)."""
    if context is None:
        body = template.without_context.format(query=query)
    else:
        body = template.with_context.format(query=query, context=context)
    if template.chat:
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": body}], tokenize=False, add_generation_prompt=True
        )
    return body


def encode_prompt(template: PromptTemplate, tokenizer: Any, prompt: str) -> list[int]:
    """Token ids of a prompt: chat prompts already hold their special tokens; plain ones get the
    tokenizer's own special tokens (e.g. BOS) as it is configured to add them."""
    return list(tokenizer(prompt, add_special_tokens=not template.chat)["input_ids"])
