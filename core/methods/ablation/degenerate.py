"""Is a generated answer degenerate text (gibberish, a repetition loop)? Flags for perturbed runs.

Noise strong enough to break the model gives answers such as "the the the the" or "ektion Bereich 7#;" whose
Z and verdict describe broken text, not a change in where the answer comes from. :func:`degeneracy` measures
an answer with three standard surface statistics and flags it when any crosses a documented threshold:

* **repetition** — rep-3 of Welleck et al. 2020 ("Neural text degeneration with unlikelihood training"): the
  share of word 3-grams that already occurred earlier in the answer, ``1 − unique / total``. Flag at
  ≥ :data:`MAX_REPETITION` (0.5: half of the answer repeats itself). A run of :data:`MAX_RUN` (4) identical
  words in a row also counts as repetition.
* **distinct-2** — Li et al. 2016: unique word bigrams / all bigrams. Flag below :data:`MIN_DISTINCT_2` (0.5),
  only with at least :data:`MIN_BIGRAMS` (8) bigrams (short answers are naturally distinct).
* **non-word share** — the share of whitespace-separated tokens that are not word-like (see :func:`is_word`):
  letters of one script with at most inner apostrophes/hyphens and a vowel when longer than three ASCII
  letters, or a number, with punctuation around it (a token of punctuation alone is not a word); no
  replacement character "�", no control character, at most
  :data:`MAX_WORD_LENGTH` characters. Flag at ≥ :data:`MAX_NON_WORD` (0.3) with at least
  :data:`MIN_TOKENS` (4) tokens; a **short answer** (fewer tokens) is flagged when most of its tokens are not
  words ("Paris", "1969", "Lyon." pass; a single token of symbols and letters such as
  ``paralleled>"…‹/了`` does not).
* **mixed scripts** — a token whose letters come from more than one script (Latin and CJK, "ЖизнTor") is not
  a word, and is named in the reasons.
* **loops** — a stretch of at least two characters (not digits alone) repeated :data:`MIN_LOOP_REPEATS` (4)
  times in a row, spaces or not ("planet-sized planet-sized …", "abcabcabcabc").
* **a repeated phrase** — a stretch of at least :data:`MIN_PHRASE_WORDS` (3) words and
  :data:`MIN_PHRASE_CHARS` (12) letters said twice back to back ("The answer to your question is: The answer to
  your question is: Paris"): a stutter that rep-3 misses when the rest of the answer is new (one repeat of a
  6-word preamble in a 13-word answer gives rep-3 0.36). Fluent text does not say a 3-word phrase twice in a
  row; a stretch said again later (not back to back) is not flagged.

An empty answer is flagged too. A run has two answers (retrieval and parametric): :func:`path_degeneracy`
checks both. The thresholds are deliberately loose: the flag is there to stop a reader from
taking gibberish as a finding, not to grade fluent text. It cannot tell a fluent wrong answer from a right one.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_REPETITION = 0.5
MAX_RUN = 4
MIN_DISTINCT_2 = 0.5
MIN_BIGRAMS = 8
MAX_NON_WORD = 0.3
MIN_TOKENS = 4
MAX_WORD_LENGTH = 20
MIN_LOOP_REPEATS = 4
MIN_PHRASE_WORDS = 3
MIN_PHRASE_CHARS = 12

_WORDS = re.compile(r"\w+", re.UNICODE)
_NUMBER = re.compile(r"^[-+]?\d[\d.,:/%-]*$")
_PUNCT = "\"'“”‘’()[]{}.,;:!?-–—…*"
_BEFORE, _AFTER = "$€£¥#", "+%°"  # currency, #1, C++, percent, degrees: allowed around a word or number
_LOOP = re.compile(r"(.{2,}?)\1{" + str(MIN_LOOP_REPEATS - 1) + ",}", re.DOTALL)
_VOWELS = set("aeiouyAEIOUY")


def _script(ch: str) -> str:
    """The first word of a letter's Unicode name (LATIN, CYRILLIC, CJK …)."""
    try:
        return unicodedata.name(ch).split(" ", 1)[0]
    except ValueError:
        return "?"


def _mixed_scripts(letters: str) -> bool:
    """Whether the letters of one token come from more than one script."""
    return len({_script(c) for c in letters if c.isalpha()}) > 1


def _scripts_mixed_in(token: str) -> bool:
    """Whether a token's letters (symbols aside) come from more than one script: "paralleled>…了"."""
    return _mixed_scripts("".join(c for c in token if c.isalpha()))


def loop_length(text: str) -> int:
    """The most times a stretch of ≥ 2 characters (not digits or spaces alone) repeats back to back in
    ``text`` (1 when nothing repeats :data:`MIN_LOOP_REPEATS` times)."""
    best = 1
    for match in _LOOP.finditer(text or ""):
        unit = match.group(1)
        if not unit.strip() or unit.strip().isdigit():
            continue
        best = max(best, len(match.group(0)) // len(unit))
    return best


def is_word(token: str) -> bool:
    """Whether a whitespace-separated token is word-like (see the module docstring)."""
    if not token or "\ufffd" in token or any(unicodedata.category(c).startswith("C") for c in token):
        return False
    core = token.strip(_PUNCT).lstrip(_BEFORE).rstrip(_AFTER)
    if core.endswith("#") and core[:-1].isalpha():
        core = core[:-1]  # C#, F#
    if not core:
        return False  # punctuation alone: a list of "-" or "," is what broken generations look like
    if _NUMBER.match(core):
        return True
    if len(core) > MAX_WORD_LENGTH:
        return False
    letters = core.replace("'", "").replace("’", "").replace("-", "")
    if not letters.isalpha():
        return False
    if _mixed_scripts(letters):
        return False
    return not (letters.isascii() and len(letters) > 3 and not set(letters) & _VOWELS)


def _ngrams(words: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def repeated_phrase(words: list[str]) -> list[str]:
    """The longest stretch of at least :data:`MIN_PHRASE_WORDS` words (and :data:`MIN_PHRASE_CHARS` letters) that
    ``words`` says twice back to back (``w[i:i+n] == w[i+n:i+2n]``), or ``[]``."""
    for n in range(len(words) // 2, MIN_PHRASE_WORDS - 1, -1):
        for i in range(len(words) - 2 * n + 1):
            if words[i] != words[i + n]:
                continue
            stretch = words[i : i + n]
            if stretch == words[i + n : i + 2 * n] and sum(map(len, stretch)) >= MIN_PHRASE_CHARS:
                return stretch
    return []


def _longest_run(words: list[str]) -> int:
    best = run = 0
    for i, w in enumerate(words):
        run = run + 1 if i and w == words[i - 1] else 1
        best = max(best, run)
    return best


@dataclass(frozen=True)
class Degeneracy:
    """Surface statistics of one answer and whether it is flagged as degenerate.

    Attributes:
        repetition: rep-3, the share of word 3-grams seen earlier in the answer (0 without any 3-gram).
        distinct_2: unique bigrams / bigrams (1 without any bigram).
        longest_run: the most identical words in a row.
        non_word: the share of whitespace tokens that are not word-like.
        degenerate: whether any threshold is crossed; ``reasons``: one short phrase per crossed threshold.
    """

    repetition: float
    distinct_2: float
    longest_run: int
    non_word: float
    degenerate: bool
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def summary(self) -> str:
        """``"degenerate: repeated words (rep-3 0.80)"`` or ``"looks like text"``."""
        return "degenerate: " + "; ".join(self.reasons) if self.degenerate else "looks like text"


def degeneracy(text: str) -> Degeneracy:
    """Measure ``text`` and flag it when it is degenerate (thresholds in the module docstring)."""
    words = [w.lower() for w in _WORDS.findall(text or "")]
    tokens = (text or "").split()
    trigrams, bigrams = _ngrams(words, 3), _ngrams(words, 2)
    repetition = 1.0 - len(set(trigrams)) / len(trigrams) if trigrams else 0.0
    distinct_2 = len(set(bigrams)) / len(bigrams) if bigrams else 1.0
    run = _longest_run(words)
    non_word = sum(not is_word(t) for t in tokens) / len(tokens) if tokens else 0.0
    loops = loop_length(text)
    mixed = [t for t in tokens if _scripts_mixed_in(t)]
    reasons = []
    if not tokens:
        reasons.append("empty answer")
    if repetition >= MAX_REPETITION:
        reasons.append(f"repeats itself (rep-3 {repetition:.2f})")
    if run >= MAX_RUN:
        reasons.append(f"{run} identical words in a row")
    if len(bigrams) >= MIN_BIGRAMS and distinct_2 < MIN_DISTINCT_2:
        reasons.append(f"few distinct word pairs (distinct-2 {distinct_2:.2f})")
    if len(tokens) >= MIN_TOKENS and non_word >= MAX_NON_WORD:
        reasons.append(f"{non_word:.0%} of its tokens are not words")
    elif tokens and len(tokens) < MIN_TOKENS and non_word > 0.5:
        reasons.append(f"a short answer of non-words ({non_word:.0%} of {len(tokens)} tokens)")
    if mixed:
        reasons.append(f"mixes scripts in {len(mixed)} token{'s' if len(mixed) > 1 else ''}")
    if loops >= MIN_LOOP_REPEATS and not any(r.startswith(("repeats", f"{run} identical")) for r in reasons):
        reasons.append(f"loops (a stretch repeated {loops} times)")
    phrase = repeated_phrase(words)
    if phrase and not any(r.startswith(("repeats itself", "loops")) for r in reasons):
        shown = " ".join(phrase)
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        reasons.append(f'repeats a phrase back to back ("{shown}")')
    return Degeneracy(
        repetition=round(repetition, 4),
        distinct_2=round(distinct_2, 4),
        longest_run=run,
        non_word=round(non_word, 4),
        degenerate=bool(reasons),
        reasons=reasons,
    )


def path_degeneracy(result: Any) -> dict[str, Degeneracy]:
    """Both answers of a dual-path run checked: ``{"retrieval": …, "parametric": …}`` (paths without an
    answer are left out)."""
    flags = {}
    for name in ("retrieval", "parametric"):
        path = getattr(result, name, None)
        if path is not None and getattr(path, "answer", None) is not None:
            flags[name] = degeneracy(str(path.answer))
    return flags


def degenerate_paths(result: Any) -> list[str]:
    """The names of a run's paths whose answer is degenerate (``[]`` when both look like text)."""
    return [name for name, flags in path_degeneracy(result).items() if flags.degenerate]


def annotate_report(report: dict[str, Any]) -> dict[str, Any]:
    """Add degeneracy flags to an ablation report (``python -m core ablate``'s JSON), in place; returns it.

    A noise grid (``answers``: conditions × seeds) gets ``degenerate``, the same shape of
    :meth:`Degeneracy.to_dict`, and ``degenerate_count`` per condition; a patching report gets
    ``patched["degenerate"]``. The clean answer gets ``clean["degenerate"]``.
    """
    if isinstance(report.get("clean"), dict) and "answer" in report["clean"]:
        report["clean"]["degenerate"] = degeneracy(report["clean"]["answer"]).to_dict()
    if isinstance(report.get("answers"), list):
        flags = [[degeneracy(a).to_dict() for a in row] for row in report["answers"]]
        report["degenerate"] = flags
        report["degenerate_count"] = [sum(f["degenerate"] for f in row) for row in flags]
    if isinstance(report.get("patched"), dict) and "answer" in report["patched"]:
        report["patched"]["degenerate"] = degeneracy(report["patched"]["answer"]).to_dict()
    return report
