"""The one vocabulary for a verdict, shared by every page, command, detector and JSON file.

A verdict answers the tool's question for one example: did the model **read** the context, or **recall** the
answer from memory? Three values, one wording:

==================  ==========================  ================================================================
JSON value          shown as                    meaning
==================  ==========================  ================================================================
``"recalled"``      Recalled from memory        the score is on the memorized side of the detector's threshold
``"read"``          Read from the context       the score is on the grounded side of the threshold
``"inconclusive"``  Inconclusive                too close to the threshold, or outside what the calibration saw
``"uncalibrated"``  No threshold                no threshold is known for this model / detector
==================  ==========================  ================================================================

Labeled data keeps its class names (``memorized`` / ``grounded`` rows): a *label* says how a row was built, a
*verdict* says what a detector concluded. JSON written before schema 3 used ``"memorized"`` / ``"grounded"`` as
verdicts; :func:`normalize_verdict` reads them.
"""

from __future__ import annotations

RECALLED = "recalled"
READ = "read"
INCONCLUSIVE = "inconclusive"
UNCALIBRATED = "uncalibrated"

VERDICTS = (RECALLED, READ, INCONCLUSIVE, UNCALIBRATED)

DISPLAY = {
    RECALLED: "Recalled from memory",
    READ: "Read from the context",
    INCONCLUSIVE: "Inconclusive",
    UNCALIBRATED: "No threshold",
}

# Verdict values of earlier releases (and the class names of labeled data) → today's verdicts.
_LEGACY = {
    "memorized": RECALLED,
    "memorised": RECALLED,
    "grounded": READ,
    "likely recalled": RECALLED,
    "context used": READ,
}


def normalize_verdict(value: str | None) -> str:
    """Today's verdict for ``value``, which may be a current value or one an earlier release wrote.

    Raises:
        ValueError: for a value that is neither.
    """
    if value is None:
        return UNCALIBRATED
    key = str(value).strip().lower()
    if key in VERDICTS:
        return key
    if key in _LEGACY:
        return _LEGACY[key]
    raise ValueError(f"unknown verdict {value!r}; expected one of {', '.join(VERDICTS)}")


def display(value: str | None) -> str:
    """The words a page shows for a verdict (old values are read too)."""
    return DISPLAY[normalize_verdict(value)]
