"""The Evaluate page's AUCs against behavior labels (issue 23): what each detector's score says about what the
model *did*, on a knowledge-conflict set or a behavior-labeled set.

Each row's label comes from its own retrieval answer (:func:`core.evaluation.behavior.behavior_report`): the
context's object and not the remembered one → read, the remembered one and not the context's → recalled, the
rest left out. The maths is in :mod:`core.evaluation.behavior`; this module builds the tables and draws them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import streamlit as st

from components import widgets
from core.evaluation import resolve_detectors
from core.evaluation.behavior import behavior_report, behavior_table
from figures import evaluate as ef

N_BOOT_PAGE = 1000


def agreement_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """One row per subset: the classes and how often the headline verdict matches the behavior."""
    rows = []
    for key, sub in ((report or {}).get("subsets") or {}).items():
        v = sub["verdict"]
        rows.append(
            {
                "subset": key,
                "what": sub["description"],
                "read": sub["n_read"],
                "recalled": sub["n_recalled"],
                "verdict matches": v["match_rate"],
                "inconclusive": v["inconclusive_rate"],
                "matches on read rows": v["per_behavior"]["read"]["match_rate"],
                "matches on recalled rows": v["per_behavior"]["recalled"]["match_rate"],
                "text-only rule matches": (sub.get("text_only") or {}).get("match_rate"),
                "axis 1 alone matches": (sub.get("axis1") or {}).get("match_rate"),
                "verdict where the text rule fails": (sub.get("text_wrong") or {}).get("match_rate"),
            }
        )
    return pd.DataFrame(rows)


BASELINES = (
    "Beside the headline, two rules that read less: the **text-only rule** reads no internals (the answer's first "
    "content word: recalled if the answer without the context contains it, read if the context does), and **axis 1 "
    "alone** reads only the internals (context reliance: needed → read, not needed → recalled). The distance "
    "between the headline and the text-only rule is what reading the model adds; the last column is the headline "
    "on the rows the text-only rule gets wrong or leaves undecided."
)


def auc_frame(report: Mapping[str, Any] | None) -> pd.DataFrame:
    """Detectors × subsets: AUC and its 95 % CI against behavior labels (empty when there is nothing)."""
    return pd.DataFrame(behavior_table(report))


def draw_table(frame: pd.DataFrame, key: str, **columns: Any) -> None:
    """``frame`` in a data grid without its index, its columns fitted to the page (``columns``: the arguments of
    :func:`components.widgets.fitted_columns`)."""
    st.dataframe(frame, hide_index=True, key=key, column_config=widgets.fitted_columns(frame, **columns))


def draw_by_group(table: pd.DataFrame, key: Callable[[str], str], **columns: Any) -> None:
    """A detectors table (with its group column, :func:`figures.evaluate.by_group`) as one grid per
    group, each under its question, the ``detector`` column pinned; ``key(group)`` keys each grid."""
    for group, frame in ef.by_group(table):
        st.markdown(ef.group_heading(group))
        draw_table(frame, key(group), pinned=("detector",), **columns)


def draw_behavior_aucs(records: Sequence[Mapping[str, Any]], detector_names: Sequence[str], *, key: str) -> None:
    """The AUC table and the verdict agreement of ``records`` against behavior labels (nothing to draw without
    ``answer_context`` / ``answer_memory``). ``key`` prefixes the widget keys
    (:data:`components.keys.EVAL_BEHAVIOR_CONFLICT` or :data:`components.keys.EVAL_BEHAVIOR_MAIN`)."""
    report = behavior_report(records, resolve_detectors(list(detector_names)), n_boot=N_BOOT_PAGE)
    if report is None:
        return
    left = ", ".join(f"{n} {k}" for k, n in sorted(report["left_out"].items())) or "none"
    st.markdown("**AUC against the model's behavior**")
    st.caption(
        "Labels from each row's own retrieval answer: the context's object and not the remembered one → read, "
        "the remembered object and not the context's → recalled (the positive class); rows whose answer names "
        f"neither or both are left out ({left}). Conflict rows alone compare two behaviors under one kind of "
        "context; the whole set mixes context constructions. Fitted detectors have a score only where the run "
        "fitted them out of fold. The CI is a percentile bootstrap over rows (1,000 resamples, seed 42)."
    )
    agreement = agreement_frame(report)
    if agreement.empty:
        st.info("No row has a read/recalled label yet.")
        return
    rates = (
        "verdict matches",
        "inconclusive",
        "matches on read rows",
        "matches on recalled rows",
        "text-only rule matches",
        "axis 1 alone matches",
        "verdict where the text rule fails",
    )
    st.caption(BASELINES)
    draw_table(agreement, f"{key}.agreement", pinned=("subset",), text=("what",), numbers=dict.fromkeys(rates, "%.2f"))
    swap = report.get("swap_agreeing")
    if swap:
        st.caption(
            f"Against the swap test, on the {swap['n']} rows whose context agrees with memory and where the swap test "
            f"decided: the headline matches on {swap['match_rate']:.0%} (undecided {swap['inconclusive_rate']:.0%})."
        )
    table = auc_frame(report)
    subsets = list(dict.fromkeys(table["subset"]))
    choice = st.selectbox("Rows", subsets, key=f"{key}.subset")
    shown = ef.with_groups(table[table["subset"] == choice].drop(columns=["subset"]))
    aucs = dict.fromkeys(("AUC", "AUC 95% CI low", "AUC 95% CI high"), "%.3f")
    # each group under its question (issue 23 part 3)
    draw_by_group(shown, lambda group: f"{key}.auc.{group}", text=("note", ef.RAW_DIRECTION_COLUMN), numbers=aucs)
    widgets.download(st, "Behavior AUCs (CSV)", table.to_csv(index=False), "behavior_aucs.csv", key=f"{key}.csv")
