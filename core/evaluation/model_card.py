"""The calibration card: what ``calibrate-model`` fitted for a model, on which rows, and how well it holds on rows
it never saw.

A card is one JSON object (``card.json`` in the model's calibration folder, :mod:`core.model.calibration_store`,
with a short text ``card.txt``): the model (name, source, slug) and template, the settings the rows were scored
with, the budget and what it bought (rows per split, behavior labels, knownness), the time and peak memory of the
run, every artifact (where it was written, fitted / kept / not fitted and why), and the **held-out** figures of the
report rows (grouped split, never fitted on): the headline's agreement with behavior — over all, per behavior, per
construction, the share *Inconclusive* — beside the text-only rule and axis 1 alone, each with its Wilson 95 %
interval; τ's FPR / FNR; each detector's AUC with a bootstrap CI. ``worth`` says what a smaller budget costs: the
interval's half-width on these rows against what the default budget's rows would give.

:func:`calibration_status` is what ``run --json`` and the app show next to the verdict: the model's card (summary),
or that the model is calibrated by the bundled files (the embedded model), or that it is not calibrated and the one
command that calibrates it.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.evaluation.constructions import labeled_by_swap
from core.io import atomic_write_json, atomic_write_text
from core.model import calibration_store
from core.model.handle import ModelHandle

if TYPE_CHECKING:
    from core.engine.calibration_record import ModelCalibration
    from core.evaluation.calibrate.budget import Budget
    from core.evaluation.calibrate.records import Fitted, RowRecord

logger = logging.getLogger(__name__)

CARD_VERSION = 1
Z95 = 1.959964
BUNDLED = "bundled"
CALIBRATED = "calibrate-model"
UNCALIBRATED = "none"


def _counts(records: list[RowRecord], split: str) -> dict[str, int]:
    """A split's rows by behavior, and how each was labeled: ``by_text`` (conflict, on-topic and invented rows: the
    answer names the context's object or the remembered one), ``by_swap`` (context and memory agree: a swap test
    that decided); undecided as ``named_neither`` (the text names neither object, or both) and ``swap_undecided``
    (the swap test did not decide, could not run, or was not run)."""
    rows = [r for r in records if r.row.split == split]
    labels = [r.label for r in rows]
    agreeing = [labeled_by_swap(r.row) for r in rows]
    return {
        "rows": len(rows),
        "read": labels.count("read"),
        "recalled": labels.count("recalled"),
        "undecided": labels.count(None),
        "agreeing_swapped": sum(r.swap is not None for r in rows),
        "by_text": sum(lab is not None and not a for lab, a in zip(labels, agreeing)),
        "by_swap": sum(lab is not None and a for lab, a in zip(labels, agreeing)),
        "named_neither": sum(lab is None and not a for lab, a in zip(labels, agreeing)),
        "swap_undecided": sum(lab is None and a for lab, a in zip(labels, agreeing)),
    }


def half_width(p: float | None, n: int) -> float | None:
    """The normal-approximation half-width of a 95 % interval of a proportion ``p`` over ``n`` rows."""
    if p is None or n <= 0:
        return None
    return Z95 * math.sqrt(max(p * (1 - p), 0.0025) / n)


def worth(card: dict[str, Any]) -> str:
    """What the budget bought, in one sentence: the headline's held-out agreement interval on these rows and, for
    a smaller (or larger) budget than the default, the half-width the default budget's rows would give."""
    head = ((card.get("held_out") or {}).get("headline") or {}).get("headline")
    budget = card.get("budget") or {}
    scored = int(budget.get("scored_rows") or 0)
    default = int(budget.get("default_rows") or 0)
    if not head or not head.get("n"):
        held = card.get("held_out") or {}
        if held.get("labeled") and "axes" in (card.get("fit_notes") or {}):
            return (
                f"The headline could not be measured on the {held['labeled']} labeled report rows: its axes were not "
                f"fitted ({card['fit_notes']['axes']}). A larger budget gives the fits more rows of each behavior."
            )
        return "No held-out report row had a behavior label: the budget was too small to measure anything."
    n, p = int(head["n"]), head.get("match_rate")
    ci = head.get("match_ci") or [None, None]
    here = half_width(p, n)
    text = (
        f"On {n} labeled report rows the headline matches behavior {_pct(p)} [{_pct(ci[0])}, {_pct(ci[1])}] "
        f"(±{100 * (here or 0):.0f} points)."
    )
    if scored and default and scored < default:
        n_default = max(1, round(n * default / scored))
        capped = budget.get("rows") is None and budget.get("minutes") is None
        what = (
            f"The default's time cap stopped it at {scored} rows"
            if capped
            else f"This quick calibration scored {scored} rows"
        )
        text += (
            f" {what}; {default} rows would give about "
            f"{n_default} labeled report rows and ±{100 * (half_width(p, n_default) or 0):.0f} points: every interval "
            f"here is about {math.sqrt(default / scored):.1f}× as wide, and the fits saw as many fewer rows."
        )
    elif scored and default and scored > default:
        text += f" It scored {scored} rows, more than the default {default}: narrower intervals than the default's."
    return text


def build_card(
    *,
    handle: ModelHandle,
    template: str,
    settings: dict[str, Any],
    budget: Budget,
    records: list[RowRecord],
    fitted: Fitted,
    figures: dict[str, Any],
    artifacts: dict[str, dict[str, Any]],
    state: dict[str, Any],
    rows_file: dict[str, Any],
    created: str,
) -> dict[str, Any]:
    """The card of one run (a JSON-ready dict; :func:`card_text` writes it out in words)."""
    card: dict[str, Any] = {
        "version": CARD_VERSION,
        "model": handle.info.name,
        "source": handle.info.source,
        "slug": handle.slug,
        "template": template,
        "created": created,
        "settings": settings,
        "rows_file": rows_file,
        "budget": {
            **budget.to_dict(),
            "described": budget.describe(),
            "scored_rows": len(records),
            "stopped_by": (state.get("rows") or {}).get("stopped_by"),
            "knownness": (state.get("rows") or {}).get("knownness"),
            "fill": (state.get("rows") or {}).get("fill"),
        },
        "rows": {"calibration": _counts(records, "calibration"), "report": _counts(records, "report")},
        "timing": {
            "seconds": state.get("seconds", {}),
            "total_seconds": state.get("elapsed"),
            "cpu_seconds": state.get("cpu_seconds"),
            "peak_rss_mb": state.get("peak_rss_mb"),
        },
        "artifacts": artifacts,
        "fit_notes": fitted.notes,
        "held_out": figures,
    }
    if fitted.axes is not None:
        card["axes"] = {"span_level": fitted.axes.span_level, "features": list(fitted.axes.features)}
    card["worth"] = worth(card)
    return card


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.0f} %"


def _agreement_line(name: str, entry: dict[str, Any] | None) -> str:
    if not entry or not entry.get("n"):
        return f"  {name}: no labeled row"
    ci = entry.get("match_ci") or [None, None]
    parts = [f"  {name}: {_pct(entry['match_rate'])} [{_pct(ci[0])}, {_pct(ci[1])}] of {entry['n']} rows"]
    for b, sub in entry["per_behavior"].items():
        sci = sub.get("match_ci") or [None, None]
        parts.append(f"{b} {_pct(sub['match_rate'])} [{_pct(sci[0])}, {_pct(sci[1])}] (n={sub['n']})")
    uci = entry.get("undecided_ci") or [None, None]
    parts.append(f"undecided {_pct(entry['undecided_rate'])} [{_pct(uci[0])}, {_pct(uci[1])}]")
    return " · ".join(parts)


def fill_lines(fill: dict[str, Any] | None) -> list[str]:
    """The card's line on the rows the budget was filled with (:mod:`core.evaluation.calibrate.fill`), if any moved."""
    moved = (fill or {}).get("moved") or {}
    if not moved:
        return []
    parts = [f"{n} {stratum} for {b}" for stratum, per in sorted(moved.items()) for b, n in sorted(per.items())]
    return [
        "Filled for the behavior that was short: calibration units taken out of their seeded turn — "
        + ", ".join(parts)
        + " (the report rows keep their seeded order)"
    ]


def card_text(card: dict[str, Any]) -> str:
    """The card in a few lines of plain text (``card.txt`` and the CLI's output)."""
    b, t, rows = card["budget"], card["timing"], card["rows"]
    budget = (
        f"Budget: {b['described']} · scored {b['scored_rows']} rows ({rows['calibration']['rows']} calibration, "
        f"{rows['report']['rows']} report; stopped by {b.get('stopped_by')}) · "
        f"{(t.get('total_seconds') or 0) / 60:.1f} min ({(t.get('cpu_seconds') or 0) / 60:.0f} CPU min) · "
        f"peak RSS {(t.get('peak_rss_mb') or 0) / 1024:.2f} GB"
    )
    lines = [f"Calibration card — {card['model']} (template {card['template']}), {card['created']}", budget]
    lines += fill_lines(b.get("fill"))
    for split in ("calibration", "report"):
        c = rows[split]
        lines.append(
            f"Behavior ({split}): {c['read']} read, {c['recalled']} recalled, {c['undecided']} undecided "
            f"({c['agreeing_swapped']} agreeing rows swap-tested)"
        )
        if "by_text" in c:  # a card written before the labels' sources were counted has none
            labeled = c["by_text"] + c["by_swap"]
            lines.append(
                f"  labeled {labeled} of {c['rows']} ({_pct(labeled / c['rows'] if c['rows'] else None)}): "
                f"{c['by_text']} by what the answer names, {c['by_swap']} by a swap test; undecided: "
                f"{c['named_neither']} name neither object (or both), {c['swap_undecided']} whose swap test did not "
                "decide"
            )
    held = card.get("held_out") or {}
    figures = held.get("headline") or {}
    lines.append(f"Held out ({held.get('rows', 0)} report rows, never fitted on), against behavior:")
    lines.append(_agreement_line("headline", figures.get("headline")))
    lines.append(_agreement_line("text-only rule", figures.get("text_only")))
    lines.append(_agreement_line("axis 1 alone", figures.get("axis1")))
    for name, entry in (held.get("by_construction") or {}).items():
        lines.append(_agreement_line(f"headline, {name}", entry))
    if held.get("bundled_headline"):
        bundled = held["bundled_headline"]["headline"]
        lines.append(_agreement_line("the bundled calibration's headline, same rows", bundled))
    tau = held.get("tau")
    if tau:
        lines.append(
            f"  τ ({tau['mode']}): FPR {_pct(tau['fpr']['rate'])} of {tau['fpr']['n']} read rows, FNR "
            f"{_pct(tau['fnr']['rate'])} of {tau['fnr']['n']} recalled rows; inconclusive "
            f"{_pct(tau['inconclusive_read']['rate'])} / {_pct(tau['inconclusive_recalled']['rate'])}"
        )
    aucs = held.get("detectors") or {}
    if aucs:
        top = sorted(aucs.items(), key=lambda kv: -kv[1]["auc"])[:8]
        lines.append(
            "  AUC (recalled vs read): "
            + " · ".join(f"{n} {v['auc']:.3f} [{v['ci'][0]:.2f}, {v['ci'][1]:.2f}]" for n, v in top)
        )
    lines.append(f"Worth: {card['worth']}")
    lines.append("Artifacts:")
    for name, a in card["artifacts"].items():
        where = f" → {a['path']}" if a.get("path") else ""
        lines.append(f"  {name}: {a['status']}{where}" + (f" ({a['note']})" if a.get("note") else ""))
    return "\n".join(lines) + "\n"


def write_card(card: dict[str, Any], folder: Path) -> Path:
    """Write ``card.json`` and ``card.txt`` into ``folder``; returns the JSON's path."""
    path = atomic_write_json(folder / calibration_store.CARD_FILE, card)
    atomic_write_text(folder / calibration_store.CARD_TEXT, card_text(card))
    return path


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("Ignoring the unreadable calibration card %s: %s", path, exc)
        return None
    return data if isinstance(data, dict) and data.get("version") == CARD_VERSION else None


def find_card(calibration: ModelCalibration) -> dict[str, Any] | None:
    """The card of a calibration record (:func:`core.engine.calibration_record.record_for`: the model's identity and
    resolved template), or ``None``."""
    card = calibration.card
    return card if card is not None and card.get("version") == CARD_VERSION else None


def card_summary(card: dict[str, Any]) -> dict[str, Any]:
    """The few figures shown next to a verdict: the headline's held-out agreement (with its interval), per
    behavior, the share undecided, the rows and budget, and ``worth``."""
    head = ((card.get("held_out") or {}).get("headline") or {}).get("headline") or {}
    text = ((card.get("held_out") or {}).get("headline") or {}).get("text_only") or {}
    return {
        "created": card.get("created"),
        "template": card.get("template"),
        "budget": (card.get("budget") or {}).get("described"),
        "scored_rows": (card.get("budget") or {}).get("scored_rows"),
        "held_out_rows": head.get("n"),
        "headline_match": head.get("match_rate"),
        "headline_match_ci": head.get("match_ci"),
        "per_behavior": {
            b: {"n": s.get("n"), "match": s.get("match_rate"), "ci": s.get("match_ci")}
            for b, s in (head.get("per_behavior") or {}).items()
        },
        "undecided": head.get("undecided_rate"),
        "text_only_match": text.get("match_rate"),
        "worth": card.get("worth"),
    }


def how_to_calibrate(model: str, source: str = "") -> str:
    """The one command that calibrates the model with this name (and source: the ``--model`` value ``--help``
    documents, :func:`core.model.calibration_store.calibrate_command`)."""
    return calibration_store.calibrate_command(model, source)


def calibration_status(calibration: ModelCalibration) -> dict[str, Any]:
    """What the verdicts of a calibration record's model are calibrated with, for ``run --json`` and the app: the
    record that decided a result (:func:`core.engine.calibration_record.record_of_result`) or the record of a loaded
    model (:func:`~core.engine.calibration_record.record_for`), so the card, the verdict and the JSON agree.

    Returns:
        ``{"calibrated", "origin", "card", "how", "id", "model"}``: ``origin`` is ``"bundled"`` (the embedded model's
        shipped files), ``"calibrate-model"`` (``card`` holds :func:`card_summary` of the model's card) or
        ``"none"`` (no calibration for this model and template). ``calibrated`` is whether the headline has its
        axes: a ``calibrate-model`` run whose budget was too small to fit them leaves its card and its other
        artifacts (τ …) but an "uncalibrated" headline. ``how`` is the command that calibrates the model (``None``
        once calibrated); ``id`` the record's key (``"<slug>/<template>"``).
    """
    base = {"id": calibration.key, "model": calibration.model}
    how = how_to_calibrate(calibration.model, calibration.source)
    if calibration.origin == BUNDLED and calibration.calibrated:
        return {"calibrated": True, "origin": BUNDLED, "card": None, "how": None, **base}
    card = find_card(calibration)
    if calibration.origin == CALIBRATED and (card is not None or calibration.calibrated):
        calibrated = calibration.calibrated
        how_now = None if calibrated else how + " (a larger budget: the axes were not fitted)"
        summary = None if card is None else card_summary(card)
        return {"calibrated": calibrated, "origin": CALIBRATED, "card": summary, "how": how_now, **base}
    return {"calibrated": False, "origin": UNCALIBRATED, "card": None, "how": how, **base}
