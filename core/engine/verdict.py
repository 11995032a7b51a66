"""The one vocabulary for a verdict, shared by every page, command, detector and JSON file.

A verdict answers the tool's question for one example: did the model **read** the context, or **recall** the
answer from memory? The values below, one wording:

==================  ==========================  ================================================================
JSON value          shown as                    meaning
==================  ==========================  ================================================================
``"recalled"``      Recalled from memory        the score is on the memorized side of the detector's threshold
``"read"``          Read from the context       the score is on the grounded side of the threshold
``"inconclusive"``  Inconclusive                too close to the threshold, or outside what the calibration saw
``"uncalibrated"``  No threshold                no threshold is known for this model / detector
``"neither"``       Neither: a guess            the two-axis headline only (:mod:`core.engine.axes`): the context
                                                was not needed and the model does not give the answer without it
==================  ==========================  ================================================================

Labeled data keeps its class names (``memorized`` / ``grounded`` rows): a *label* says how a row was built, a
*verdict* says what a detector concluded. JSON written before schema 3 used ``"memorized"`` / ``"grounded"`` as
verdicts; :func:`normalize_verdict` reads them.

RePCS' rule (:func:`decide`) lives here too, beside the words it returns: Z < τ ⇒ recalled, with the
length-aware τ(L)'s inconclusive band and length range (:mod:`core.engine.threshold`).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.engine.threshold import TAU_LENGTH, TAU_PAPER, Threshold

RECALLED = "recalled"
READ = "read"
MEMORIZED = "memorized"
"""The class name of a labeled *memorized* row (a data label, not a verdict), and the direction of a score whose
higher values point to it (:data:`core.detectors.registry.MEMORIZED_HIGH`)."""
GROUNDED = "grounded"
"""The class name of a labeled *grounded* (clean, context-dependent) row."""
INCONCLUSIVE = "inconclusive"
UNCALIBRATED = "uncalibrated"
NEITHER = "neither"

VERDICTS = (RECALLED, READ, INCONCLUSIVE, UNCALIBRATED, NEITHER)

DISPLAY = {
    RECALLED: "Recalled from memory",
    READ: "Read from the context",
    INCONCLUSIVE: "Inconclusive",
    UNCALIBRATED: "No threshold",
    NEITHER: "Neither: a guess",
}

# Verdict values of earlier releases (and the class names of labeled data) → today's verdicts.
_LEGACY = {
    MEMORIZED: RECALLED,
    "memorised": RECALLED,
    GROUNDED: READ,
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


def repcs_verdict(z: float, tau: float) -> str:
    """``"recalled"`` when Z < τ, else ``"read"`` (RePCS' one-shot test; the paper's "memorised" / "grounded")."""
    return RECALLED if z < tau else READ


@dataclass(frozen=True)
class Decision:
    """The verdict of one row and why.

    Attributes:
        verdict: one of :data:`VERDICTS`.
        tau: the τ Z was compared with (τ(L) for the length-aware τ), ``None`` without a threshold.
        band: ``(low, high)`` of the inconclusive band at this L (length-aware τ only), else ``None``.
        reason: one plain sentence.
        mode: :data:`TAU_LENGTH` or :data:`TAU_PAPER` (``None`` without a threshold).
        n_scored: L, the scored answer tokens.
    """

    verdict: str
    tau: float | None
    band: tuple[float, float] | None
    reason: str
    mode: str | None
    n_scored: int


def decide(z: float, n_scored: int, threshold: Threshold | None) -> Decision:
    """The verdict for Z over L scored tokens under ``threshold``.

    * no threshold → ``"uncalibrated"``; an empty answer (L = 0) → ``"inconclusive"``;
    * a threshold without a length model (the paper's setting, or a file written before it existed) →
      RePCS' one-shot test Z < τ ⇒ ``"recalled"``, else ``"read"``;
    * with a length model: L outside [L_min, L_max] → ``"inconclusive"`` (τ(L) would be extrapolated); Z
      inside the band at L → ``"inconclusive"``; otherwise Z < τ(L) ⇒ ``"recalled"``, else ``"read"``.
    """
    L = int(n_scored)
    if threshold is None:
        return Decision(UNCALIBRATED, None, None, "No threshold τ is known for this model: calibrate one.", None, L)
    lt = threshold.length_tau
    mode = TAU_LENGTH if lt is not None else TAU_PAPER
    if L < 1:
        tau = None if lt is None else lt.tau(1)
        return Decision(
            INCONCLUSIVE, tau, None, "The answer is empty: no token was scored, so Z says nothing.", mode, L
        )
    if lt is None:
        tau = float(threshold.tau)
        rel = "<" if z < tau else "≥"
        return Decision(
            repcs_verdict(z, tau),
            tau,
            None,
            f"Z = {z:.3f} {rel} τ = {tau:.3f} nats (one constant τ, RePCS Alg. 1).",
            mode,
            L,
        )
    tau = lt.tau(L)
    low, high = lt.band(L)
    if not lt.covers(L):
        side = "shorter" if lt.L_min > L else "longer"
        return Decision(
            INCONCLUSIVE,
            tau,
            (low, high),
            f"The answer has {L} scored tokens, {side} than any clean calibration answer ({lt.L_min}–{lt.L_max}): "
            f"τ({L}) = {tau:.3f} nats is extrapolated, so the verdict is withheld (Z = {z:.3f}).",
            mode,
            L,
        )
    if low <= z <= high:
        return Decision(
            INCONCLUSIVE,
            tau,
            (low, high),
            f"Z = {z:.3f} nats lies within the calibration's {lt.band_level:.0%} uncertainty band of "
            f"τ({L}) = {tau:.3f}: [{low:.3f}, {high:.3f}].",
            mode,
            L,
        )
    rel = "<" if z < tau else "≥"
    side = "below" if z < low else "above"
    return Decision(
        repcs_verdict(z, tau),
        tau,
        (low, high),
        f"Z = {z:.3f} {rel} τ({L}) = {tau:.3f} nats, {side} the {lt.band_level:.0%} band [{low:.3f}, {high:.3f}].",
        mode,
        L,
    )


def repcs_question(repcs: str | None, headline: str | None) -> str | None:
    """What RePCS' own verdict answers, said where it decides and disagrees with the headline (``None`` otherwise).

    RePCS (Z against τ) asks whether the answer's distribution as a whole moved with the context: Z sums the
    per-token KL over the first T answer tokens. The headline asks whether the words that answer the question came
    from the context (axis 1 at the answer span, axis 2 for what the model knows without it, a decided swap test).
    An answer can read its one fact from a context that barely moves the rest of its tokens (a low Z, RePCS says
    *recalled*), or copy a context's wording around a remembered fact (a high Z, RePCS says *read*)."""
    ours, theirs = normalize_verdict(headline), normalize_verdict(repcs)
    if theirs not in (READ, RECALLED) or ours == theirs:
        return None
    shift = "barely moved" if theirs == RECALLED else "moved"
    return (
        f"RePCS asks another question than the headline: whether the context moved the answer's distribution as a "
        f"whole (Z, the per-token KL summed over the first tokens); here it {shift}, so RePCS says "
        f"“{display(theirs)}”. The headline reads the words that answer the question (“{display(ours)}”): where the "
        "two differ, the headline is the verdict."
    )
