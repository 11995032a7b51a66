"""The words of the agreement view: short detector names, RADAR's own labels and the one summary line.

Split from :mod:`core.detectors.agreement` (which re-exports every name here). The verdict words are
:mod:`core.engine.verdict`'s; RADAR answers another question than read/recalled, so its labels have their own
words (:data:`OTHER_AXIS_DISPLAY`) and never count in :func:`summary_line`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.engine.verdict import DISPLAY, READ, RECALLED, normalize_verdict

if TYPE_CHECKING:
    from core.detectors.agreement import DetectorVerdict

RECALL_TYPE = "recall-type"
"""RADAR's label for a query that looks like recall (its own axis: not a read/recalled verdict)."""
REASONING_TYPE = "reasoning-type"
"""RADAR's label for a query that looks like reasoning."""
OTHER_AXIS_DISPLAY = {
    RECALL_TYPE: "Recall-type query (RADAR)",
    REASONING_TYPE: "Reasoning-type query (RADAR)",
}
"""How a page shows the labels of a detector that answers another question than read/recalled."""


def verdict_words(verdict: str) -> str:
    """The words a page shows for a row's verdict: the shared wording, or RADAR's own labels."""
    return OTHER_AXIS_DISPLAY.get(verdict) or DISPLAY[normalize_verdict(verdict)]


def _names(verdicts: list[DetectorVerdict]) -> str:
    labels = [short_name(v.name) for v in verdicts]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


SHORT_NAMES = {
    "repcs": "RePCS",
    "repcs_mean": "mean KL",
    "max_token_kl": "max KL",
    "crm_lts": "CRM LTS",
    "crm_l2": "CRM L2-norm",
    "crm_lr": "CRM-LR",
    "crm_l1": "CRM L1",
    "radar": "RADAR",
    "ppl": "perplexity",
    "zlib": "zlib",
    "selfcritique": "Self-Critique",
    "sma": "SMA",
    "combined": "combined",
}


def short_name(name: str) -> str:
    """A short human name for a detector (``min_k_10`` → ``Min-10%``; unknown names as they are)."""
    if name in SHORT_NAMES:
        return SHORT_NAMES[name]
    if name.startswith("min_kpp_"):
        return f"Min-{name.removeprefix('min_kpp_')}%++"
    if name.startswith("min_k_"):
        return f"Min-{name.removeprefix('min_k_')}%"
    return name


def _say(n: int) -> str:
    return f"{n} says" if n == 1 else f"{n} say"


def summary_line(verdicts: list[DetectorVerdict]) -> str:
    """Where the detectors agree and conflict, in one sentence a student understands.

    Counts only detectors with a verdict of recalled or read; the others are mentioned by number.
    """
    recalled = [v for v in verdicts if v.verdict == RECALLED]
    read = [v for v in verdicts if v.verdict == READ]
    rest = len(verdicts) - len(recalled) - len(read)
    gives = "gives" if rest == 1 else "give"
    tail = f" ({rest} more {gives} no verdict here: no score, no threshold or too close to call.)" if rest else ""
    if not recalled and not read:
        return "No detector has both a score and a threshold for this example, so there is nothing to compare." + tail
    if len(recalled) + len(read) == 1:
        (only,) = recalled + read
        return f"Only {short_name(only.name)} has a verdict here: “{DISPLAY[only.verdict]}”." + tail
    if not read:
        return (
            f"They agree: all {len(recalled)} say the answer was {DISPLAY[RECALLED].lower()} "
            f"({_names(recalled)})." + tail
        )
    if not recalled:
        return f"They agree: all {len(read)} say the model {DISPLAY[READ].lower()} ({_names(read)})." + tail
    quote = {RECALLED: f"“{DISPLAY[RECALLED]}”", READ: f"“{DISPLAY[READ]}”"}
    return (
        f"They conflict: {_say(len(recalled))} {quote[RECALLED]} ({_names(recalled)}) and {_say(len(read))} "
        f"{quote[READ]} ({_names(read)}). They measure different things, so a count is not a verdict: see "
        "what each one measures." + tail
    )
