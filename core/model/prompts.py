"""Prompt templates for the two paths.

The retrieval prompt is a template filled with the query and the context; the parametric prompt is the
*same* template with the context segment removed, so the only difference between the two paths is the
context. Templates A–D are the plain templates of the CRM paper (appendix D.1); ``chat`` wraps template A's
body in the tokenizer's chat template. ``auto`` picks ``chat`` when the tokenizer has a chat template.

User text never becomes a control token: :func:`neutralize_special_tokens` breaks every special or added token
string of the tokenizer (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>`` …) that appears in a query or a
context with an invisible word joiner (U+2060), so it is encoded as plain text; :func:`build_prompt` applies
it to every prompt it builds, and :func:`core.engine.prepare.prepare_prompts` reports it as a warning.
"""

from __future__ import annotations

import re
import unicodedata
import weakref
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

    @property
    def turn_labels(self) -> tuple[str, ...]:
        """The labels this plain template writes at the start of its lines (A: ``Context``, ``Question``,
        ``Answer``); a model that writes one of them on a new line after its answer has begun a turn of its own
        (:mod:`core.engine.turns`). A chat template has none: its turns end with the model's end token."""
        if self.chat:
            return ()
        found = re.findall(r"(?m)^([^\n:{}]{1,40}):", self.with_context)
        return tuple(dict.fromkeys(label.strip() for label in found))


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

TURN_CUT = "cut at the model's own turn (2026-12-04)"
"""How a plain template's answers end: at the first line where the model begins a turn of its own
(:mod:`core.engine.turns`). It is part of a calibration's identity (:func:`answer_ending`), so a calibration made
when such answers ran on to the token cap is not used for the answers scored now."""


def answer_ending(template_key: str) -> str | None:
    """How answers end under the resolved template ``template_key``: :data:`TURN_CUT` for a plain template,
    ``None`` for a chat template (its end token, unchanged) or an unknown key."""
    template = TEMPLATES.get(template_key)
    return TURN_CUT if template is not None and template.turn_labels else None


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


def check_chat_template(tokenizer: Any, what: str) -> None:
    """Refuse, at load, a tokenizer whose chat template cannot build a prompt.

    The template is rendered once as :func:`build_prompt` renders it (one user turn, the generation prompt), so a
    template that does not compile (a Jinja ``TemplateSyntaxError``) or fails while rendering is found when the
    model loads, not at the first run. The load is refused rather than the template dropped: without it ``auto``
    would quietly switch the model to the plain template A, a different prompt than the model's own.

    Raises:
        ValueError: the message names the model and the template's error (and its line, when Jinja gives one).
    """
    if not getattr(tokenizer, "chat_template", None):
        return
    try:
        out = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Question: ?"}], tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # noqa: BLE001 - jinja2's errors, or whatever the template raises
        line = getattr(exc, "lineno", None)
        where = f" (line {line} of the template)" if isinstance(line, int) else ""
        raise ValueError(
            f"The chat template of {what} is broken: {type(exc).__name__}: {exc}{where}. Its prompts cannot be "
            "built, so the model was not loaded: fix the template (the tokenizer's chat_template, in a GGUF file "
            "tokenizer.chat_template) or use a copy of the model with a working one."
        ) from None
    if not isinstance(out, str):
        raise ValueError(f"The chat template of {what} does not render to text (it gave {type(out).__name__}).")


SPECIAL_BREAK = "\u2060"
"""The invisible character (WORD JOINER) inserted after the first character of a special-token string found in
user text, so the tokenizer no longer matches it as one control token."""


_SPECIALS: weakref.WeakKeyDictionary[Any, tuple[int, tuple[str, ...], re.Pattern[str] | None]] = (
    weakref.WeakKeyDictionary()
)
"""Per tokenizer: its size when last read, its control-token strings and their pattern (Gemma 3's tokenizer has
thousands of added tokens: reading them took 74 ms a prompt, 9 s of every four calibration rows)."""


def _specials(tokenizer: Any) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    """:func:`special_token_strings` and their pattern, kept per tokenizer until its size changes."""
    try:
        size = len(tokenizer)
        kept = _SPECIALS.get(tokenizer)
    except TypeError:  # a tokenizer without a length or that cannot be weakly referenced: read every time
        size, kept = -1, None
    if kept is not None and kept[0] == size:
        return kept[1], kept[2]
    strings = _read_special_token_strings(tokenizer)
    pattern = re.compile("|".join(re.escape(t) for t in strings)) if strings else None
    if size >= 0:
        _SPECIALS[tokenizer] = (size, strings, pattern)
    return strings, pattern


def special_token_strings(tokenizer: Any) -> tuple[str, ...]:
    """Every string the tokenizer would encode as a control token, longest first.

    The tokenizer's special tokens, its added tokens marked special, and added tokens written like markup
    (``<…>`` or ``[…]``, e.g. ``<think>``) even when not marked special; single characters and whitespace-only
    tokens are left out (they are ordinary text). Kept per tokenizer until its vocabulary's size changes.
    """
    return _specials(tokenizer)[0]


def _read_special_token_strings(tokenizer: Any) -> tuple[str, ...]:
    found: set[str] = set(getattr(tokenizer, "all_special_tokens", None) or [])
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        content = getattr(token, "content", str(token))
        markup = content[:1] in "<[" and content[-1:] in ">]" and len(content) >= 3
        if getattr(token, "special", False) or markup:
            found.add(content)
    usable = [t for t in found if isinstance(t, str) and len(t) >= 2 and t.strip()]
    return tuple(sorted(usable, key=lambda t: (-len(t), t)))


def neutralize_special_tokens(text: str, tokenizer: Any) -> tuple[str, list[str]]:
    """Break every control-token string of ``tokenizer`` in user ``text`` so it is encoded as plain text.

    Each occurrence gets :data:`SPECIAL_BREAK` after its first character (``<|im_end|>`` → ``<⁠|im_end|>``,
    which looks the same); the pass repeats until no occurrence is left (overlapping tokens).

    Returns:
        The neutralized text and the token strings found, in order of appearance (empty when none).
    """
    _, pattern = _specials(tokenizer)
    if not text or pattern is None:
        return text, []
    found: list[str] = []

    def breaks(match: re.Match[str]) -> str:
        found.append(match.group())
        return match.group()[0] + SPECIAL_BREAK + match.group()[1:]

    for _ in range(len(text) + 1):
        text, n = pattern.subn(breaks, text)
        if not n:
            break
    return text, found


def special_token_warning(found: list[str]) -> str:
    """The sentence a result carries when user text held control-token strings (see
    :func:`neutralize_special_tokens`)."""
    names = list(dict.fromkeys(found))
    shown = ", ".join(names[:4]) + (" …" if len(names) > 4 else "")
    return (
        f"The input contained {len(found)} control token string(s) of this model's tokenizer ({shown}). They were "
        "kept as plain text (an invisible word joiner inserted), so they cannot open or close a chat turn or "
        "otherwise change the prompt's structure."
    )


def clean_text(text: str) -> tuple[str, int]:
    """Remove control characters other than newline and tab; keep emoji, right-to-left text, etc.

    Returns:
        The cleaned text and the number of characters removed (so the caller can say so).
    """
    kept = [c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc"]
    return "".join(kept), len(text) - len(kept)


def _noncharacter(c: str) -> bool:
    """A Unicode noncharacter (U+FDD0–U+FDEF, and the last two code points of every plane, U+FFFE/U+FFFF …):
    never a visible character, whatever a font does with it."""
    code = ord(c)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


def has_visible_text(text: str) -> bool:
    """Whether ``text`` has a character that is neither whitespace, nor an invisible format character (zero-width
    space/joiners, word joiner, BOM, bidi marks: Unicode category Cf), nor a noncharacter (U+FFFF …)."""
    return any(not c.isspace() and unicodedata.category(c) != "Cf" and not _noncharacter(c) for c in text)


def _surrogate_message(name: str, text: str, at: int) -> str:
    """What is wrong with a text that cannot be encoded as UTF-8: in Python only a lone surrogate (U+D800–U+DFFF,
    one half of a UTF-16 pair without the other, e.g. JSON's ``"\\ud800"``) makes ``str.encode`` fail."""
    code = ord(text[at])
    byte = (
        f" (Python's stand-in for the undecodable byte 0x{code - 0xDC00:02X} of a file or terminal that was not UTF-8)"
        if 0xDC80 <= code <= 0xDCFF
        else ""
    )
    return (
        f"The {name} is not valid text: character {at} is a lone surrogate, U+{code:04X}{byte}: half of a UTF-16 "
        "pair without its other half, which is not a character. Send the text as valid Unicode."
    )


def clean_inputs(query: str, context: str) -> tuple[str, str, int]:
    """The query and context cleaned (:func:`clean_text`) and stripped, and how many characters were removed.

    Each caller has its own rule for an empty context; an empty query is never valid. A query or context of
    whitespace and zero-width characters only counts as empty (the context comes back as ``""``).

    Raises:
        ValueError: a non-text input, or a query that is empty or only whitespace.
    """
    if not isinstance(query, str) or not isinstance(context, str):
        raise ValueError("query and context must be text")
    for name, text in (("query", query), ("context", context)):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(_surrogate_message(name, text, exc.start)) from None
    query, removed_q = clean_text(query)
    context, removed_c = clean_text(context)
    query, context = query.strip(), context.strip()
    if not has_visible_text(context):
        context = ""
    if not has_visible_text(query):
        raise ValueError(
            "The query is empty. Type a question (whitespace and zero-width characters alone do not count)."
        )
    return query, context, removed_q + removed_c


def build_prompt(template: PromptTemplate, tokenizer: Any, query: str, context: str | None) -> str:
    """The prompt string for one path (``context=None`` gives the parametric prompt).

    The query and the context pass through :func:`neutralize_special_tokens` first, so only the template
    (and the chat template's own markup) can put control tokens into the prompt.
    """
    query = neutralize_special_tokens(query, tokenizer)[0]
    if context is not None:
        context = neutralize_special_tokens(context, tokenizer)[0]
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
    tokenizer's own special tokens (e.g. BOS) as it is configured to add them. The prompt must come from
    :func:`build_prompt` (user text neutralized), since control-token strings in it are parsed as such."""
    return list(tokenizer(prompt, add_special_tokens=not template.chat)["input_ids"])
