"""The agreement view of the Dual Path page: every detector's verdict on the last run, at a glance.

All scoring is :func:`core.detectors.agreement.assess` (the registry's cheap detectors) and
:func:`core.detectors.agreement.judge` (a costly one, on request); this module only draws, group by group
(:data:`core.detectors.registry.GROUPS`, in order, each under its question): the group's summary (what its
detectors measure and, for the two groups that feed the headline, which of them disagree with the headline's axis
and why — never a count of detectors), a table (what each verdict says in the group's own words and whether it
agrees with the headline's axis, score, threshold, "higher = …", where the threshold came from), a button per costly
detector of the group with its time estimate, and at the end a link to each detector's page (the page its
declaration names). Results are kept
per run in a session LRU, so redrawing never re-scores; when the τ in force changes, RePCS' row follows the
run's re-decided verdict (:func:`core.detectors.agreement.with_result`) and RADAR's row keeps its own
recall-vs-reasoning words.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from components import keys
from components.lru import session_lru
from components.progress import detector_estimate, judge_measured
from components.text import redact_paths
from core.detectors import get
from core.detectors.agreement import (
    HEADLINE_GROUPS,
    Agreement,
    CostlyDetector,
    DetectorVerdict,
    assess,
    detector_input,
    short_name,
    with_result,
)
from core.detectors.registry import EVALUATE_PAGE, GROUPS, DetectorInput
from core.detectors.wording import GROUP_WORDS, axis_line
from core.engine.result import DualPathResult
from core.model.handle import ModelHandle

MAX_KEPT = 8
"""Agreement views kept per browser session (one per recent run)."""

PAGE_SCRIPTS = {
    "Dual Path": "pages/1_Dual_Path.py",
    "Attention": "pages/2_Attention.py",
    "Layer trajectories": "pages/3_Layer_Trajectories.py",
    "Self-Critique": "pages/6_Self_Critique.py",
    "Source attribution": "pages/7_Source_Attribution.py",
    "RADAR": "pages/8_RADAR.py",
    EVALUATE_PAGE: "pages/9_Evaluate.py",
}
"""Each page title a declaration may name (``Detector.page``) and its script; keyed by page, not by detector."""


def page_for(name: str) -> tuple[str, str]:
    """(page script, page title) that explains the detector ``name``: the page its declaration names (the Evaluate
    page for an unknown name or page: every detector is scored there on labeled data)."""
    detector = get(name)
    title = detector.page if detector is not None and detector.page in PAGE_SCRIPTS else EVALUATE_PAGE
    return PAGE_SCRIPTS[title], title


def _store():
    return session_lru(keys.AGREEMENT, MAX_KEPT)


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.3e}"


HEADLINE_WORDS = {"agrees": " · agrees with the headline", "disagrees": " · disagrees with the headline", None: ""}
"""Added to the "says" cell of a row of a group that feeds the headline: the row against that group's axis."""


def table(verdicts: list[DetectorVerdict], agreement: Agreement | None = None) -> pd.DataFrame:
    """One row per detector: name, what its verdict says (in its group's own words, and whether it agrees with
    the headline's axis of its group), score, threshold, direction ("higher = …", in the group's words), where the
    threshold comes from, what it measures."""
    rows = []
    for v in verdicts:
        why = v.source if v.error is None else f"not scored: {redact_paths(v.error)}"  # grid text: no markdown
        if v.note:
            why = f"{why} · {v.note}"
        rows.append(
            {
                "detector": short_name(v.name),
                "verdict": v.says + HEADLINE_WORDS[None if agreement is None else agreement.against_headline(v)],
                "score": _fmt(v.score),
                "threshold": _fmt(v.threshold),
                "direction": v.direction,
                "threshold from": why,
                "measures": v.label,
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


COLUMNS = {
    "detector": st.column_config.TextColumn("detector", width=95, pinned=True),
    "verdict": st.column_config.TextColumn(
        "says",
        width=160,
        help="The verdict in its group's own words; in the two groups that feed the headline, whether it agrees "
        "with the headline's axis (the summary above says why those that disagree do)",
    ),
    "score": st.column_config.TextColumn("score", width=70),
    "threshold": st.column_config.TextColumn("threshold", width=70),
    "direction": st.column_config.TextColumn("direction", width=150, help="What a higher score means"),
    "threshold from": st.column_config.TextColumn("where the threshold comes from", width=285),
    "measures": st.column_config.TextColumn("what it measures", width=130),
}
"""Column widths in pixels, 960 in all: the whole table fits the page's 978 px at a 1,440 px window (with the
sidebar open), so no column is cut at the right edge (the named widths came to 1,225 px and hid "what it
measures" and half of "where the threshold comes from"; checked by tests/e2e/test_layout_browser.py). A longer
cell shows its whole text on hover, and the result JSON has every field; narrower windows scroll the table
sideways with the detector's name pinned."""
ROW_PX = 72
"""Height of one data-grid row, three lines: the grid wraps a cell's text only in rows taller than 64 px, so the
threshold's source is read whole instead of cut ("bundled calibration: 5%-quantile o…"). The table is drawn
tall enough to show every detector without scrolling."""
HEADER_PX = 35
"""Height of the grid's header row."""


def _compute(handle: ModelHandle, result: DualPathResult) -> tuple[Agreement, DetectorInput]:
    inp = detector_input(handle, result)
    bar = st.progress(0.0, text="Scoring every cheap detector on this run…")

    def step(done: int, total: int, name: str) -> None:
        bar.progress(done / max(total, 1), text=f"Scoring {short_name(name)} ({done + 1} of {total})…")

    agreement = assess(handle, result, inp=inp, on_detector=step)
    bar.empty()
    return agreement, inp


CONTAINER = "agreement_view"
"""The section's container key (the browser shows it as the CSS class ``st-key-agreement_view``)."""


def draw(handle: ModelHandle, result: DualPathResult, tag: str) -> Agreement | None:
    """The agreement section for ``result`` (computed once per run; ``tag`` identifies the run)."""
    with st.container(key=CONTAINER):
        return _draw(handle, result, tag)


def _draw(handle: ModelHandle, result: DualPathResult, tag: str) -> Agreement | None:
    st.subheader("Every detector on this example")
    st.caption(
        "Detectors answer different questions, so they are grouped by the question each one answers and speak "
        "that question's words. Each compares its own measurement with its own threshold: the tables say what each "
        "one concluded, which way its score points and where its threshold comes from. Only the first two groups "
        "feed the headline verdict, through its two axes, not through a vote: each of those groups says where its "
        "detectors disagree with the headline and why, and detectors are never counted against each other."
    )
    if result.model != handle.info.name:
        st.info("This run was made with another model: run it again to score every detector with this one.")
        return None
    store = _store()
    entry = store.get(tag)
    if entry is None:
        entry = _compute(handle, result)
        store.put(tag, entry)
    agreement, inp = entry
    if inp.result is not result:  # the same run under another τ: keep every score, follow the τ in force
        agreement = with_result(agreement, inp, result)
        store.put(tag, (agreement, inp))
    for group, rows, pending in agreement.by_group():
        _group(group, rows, pending, inp, tag, agreement)
    _links(agreement)
    return agreement


def headline_note(group: str) -> str:
    """Whether the group feeds the headline verdict, and what it cannot conclude."""
    feeds = "Feeds the headline verdict." if group in HEADLINE_GROUPS else "Does not feed the headline verdict."
    return f"{feeds} Cannot conclude {GROUP_WORDS[group].cannot}."


def _group(
    group: str,
    rows: list[DetectorVerdict],
    pending: list[CostlyDetector],
    inp: DetectorInput,
    tag: str,
    agreement: Agreement,
) -> None:
    """One group: its question, its own summary line, its table, the buttons of its costly detectors."""
    st.markdown(f"**{GROUP_WORDS[group].title}** — {GROUPS[group]}")  # the registry's own words: no user text
    if group in agreement.axes:  # the headline's axis this group feeds (fixed words and numbers only)
        st.markdown(":material/flag: " + axis_line(group, agreement.axes[group]))
    st.info(agreement.group_summary(group))  # what its members measure, who disagrees with the headline and why
    st.caption(headline_note(group))
    if rows:
        frame = table(rows, agreement)
        st.dataframe(
            frame,
            hide_index=True,
            column_config=COLUMNS,
            row_height=ROW_PX,
            height=HEADER_PX + ROW_PX * len(frame) + 3,
        )
    _costly(pending, agreement, inp, tag)


def _links(agreement: Agreement) -> None:
    """One link per page, naming the detectors it explains."""
    by_page: dict[tuple[str, str], list[str]] = {}
    for name in dict.fromkeys([v.name for v in agreement.verdicts] + [c.name for c in agreement.costly]):  # once each
        by_page.setdefault(page_for(name), []).append(short_name(name))
    st.caption("Each detector's page: " + " · ".join(f"{t}: {', '.join(n)}" for (_, t), n in by_page.items()))
    columns = st.columns(len(by_page) or 1)
    for column, ((script, title), names) in zip(columns, by_page.items(), strict=True):
        with column:
            st.page_link(script, label=title, help=", ".join(names), icon=":material/arrow_forward:")


def _costly(pending: list[CostlyDetector], agreement: Agreement, inp: DetectorInput, tag: str) -> None:
    """A button per detector of one group that needs extra generations, with its estimate; its verdict joins the
    group's table."""
    if not pending:
        return
    st.caption("Needs extra generations (run one when you want its verdict too):")
    columns = st.columns(len(pending))
    for column, costly in zip(columns, pending, strict=True):
        with column:
            clicked = st.button(
                f"Run {short_name(costly.name)}",
                key=keys.scoped(keys.AGREEMENT_RUN, costly.name, tag),
                help=costly.label,
                icon=":material/play_arrow:",
            )
            wait = detector_estimate(inp, costly.name, costly.estimate_s)
            st.caption(wait)  # from this detector's last runs once there are some (they are timed below)
        if clicked:
            detector = get(costly.name)
            if detector is None:
                continue
            with st.spinner(f"Running {short_name(costly.name)} ({wait})…"):
                verdict = judge_measured(detector, inp)
            agreement.verdicts.append(verdict)
            st.rerun()
