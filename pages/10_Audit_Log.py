"""Audit log: what the CRM audit service (``python -m core serve``) has screened, read from its database.

The page opens the service's SQLite file read-only (``$READ_OR_RECALL_AUDIT_DB``, else the default ``serve``
writes to): the chain's verification, the counters, the anomaly rate over time, the history table, and one
record's LTS trajectory drawn like the Layer trajectories page against the band of the calibration it was
scored with. It never writes to the database and never runs the model.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Audit log",
    plain="Every question and passage the audit service checked before the model answered, with a flag when the "
    "passage moved the model's internal state unusually — and proof that no record was changed afterwards.",
    precise="Each record holds CRM's latent trajectory shift LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ scored against the deployment's "
    "calibration (μ_ℓ ± 2σ_ℓ per layer). Records are kept in a hash chain (sha256 of the previous hash and "
    "the canonical record). A flag says this pair moved the hidden states unusually compared with the "
    "calibration rows; it does not certify which source a generation used.",
    citation="CRM (2025) eq. 1 and appendix V.1; the service is described in docs/audit.md.",
)  # on screen while the imports below run

import streamlit as st

from components import keys, prologue
from components.text import plain_message
from core.audit.chain import DAMAGED
from core.audit.store import DB_ENV, AuditReader, default_db_path
from core.public import AUDIT_LOG_ENV, current_policy

HISTORY_ROWS = 200
FILTERS = {"all": "All audits", "flagged": "Flagged only", "unflagged": "Not flagged"}


def draw_source() -> AuditReader | None:
    policy = current_policy()
    if not policy.shows_audit_log:
        st.info(
            "This is a public deployment: the audit log is not shown here, because it holds every query and "
            "passage the audit service checked (the service itself keeps them behind its token). An operator "
            f"who wants visitors to see it sets {AUDIT_LOG_ENV}=1."
        )
        return None
    if policy.public:
        st.warning(
            f"Public deployment with {AUDIT_LOG_ENV}=1: every visitor can read the stored queries and passages below."
        )
    path = default_db_path()
    st.caption(
        f"Reading {plain_message(str(path))} (read-only). Set {DB_ENV} before starting the app to read another "
        "file; `python -m core serve` writes to the same default. Start the service with `make serve`."
    )
    if not path.is_file():
        st.info("No audit database there yet: start the service (`python -m core serve`) and send it an audit.")
        return None
    st.button("Refresh", key=keys.AUDIT_REFRESH, help="Read the database again (new audits appear).")
    return AuditReader(path)


# Which database, and the Refresh button, before the page's libraries (plotly figures, pandas tables): the light
# modules only. The history's filter stays under the figures it filters (it is drawn only when there is a log).
early = prologue.begin()
reader = draw_source()

from components.page import open_page
from figures.audit import (
    as_dict,
    history_frame,
    rate_figure,
    record_facts,
    record_label,
    record_trajectory_figure,
)


def draw_chain(reader: AuditReader) -> bool:
    """The chain's status; ``False`` when the file itself is damaged (nothing else of it is read then)."""
    report = reader.verify()
    if report.ok:
        st.success(
            f"Hash chain verified: {report.n_records:,} records intact, in order, none missing. "
            f"Head hash {report.head_hash[:16]}… (publish it elsewhere to make rewriting detectable)."
        )
    elif report.problem == DAMAGED:
        st.error(
            f"Audit database DAMAGED: {plain_message(report.message)} Nothing more of it is shown: its records "
            "cannot be vouched for. `python -m core audit verify` reports the same (exit code 3)."
        )
        return False
    else:
        st.error(f"Hash chain BROKEN ({report.problem}): {plain_message(report.message)}")
    return True


def draw_counters(reader: AuditReader) -> None:
    stats = reader.stats()
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.metric("Audits", f"{stats['records']:,}")
    c2.metric("Flagged", f"{stats['anomalies']:,}")
    rate = stats["anomaly_rate"]
    c3.metric("Anomaly rate", "—" if rate is None else f"{rate:.1%}")
    p50, p99 = stats["latency_ms"]["p50"], stats["latency_ms"]["p99"]
    c4.metric("Latency p50", "—" if p50 is None else f"{p50:,.0f} ms", help="As recorded by the service.")
    c5.metric("Latency p99", "—" if p99 is None else f"{p99:,.0f} ms")
    if stats["last_at"]:
        st.caption(f"First audit {stats['first_at']}, last audit {stats['last_at']} (UTC).")
    if len(stats["models"]) > 1 or len(stats["calibration_ids"]) > 1:
        st.caption(
            f"This log holds audits of {len(stats['models'])} model(s) and {len(stats['calibration_ids'])} "
            "calibration(s); rates mix them."
        )


def draw_rate(reader: AuditReader) -> None:
    st.subheader("Anomaly rate over time")
    st.plotly_chart(rate_figure(reader.timeline()), key=keys.AUDIT_RATE)
    st.caption(
        "The flag fires when the anomaly score (mean |LTS_ℓ − μ_ℓ| / σ_ℓ over the layers) exceeds the (1 − α) "
        "quantile of the calibration rows' own scores, so on clean in-domain traffic about α (5 %) are flagged."
    )


def draw_history(reader: AuditReader) -> list[dict]:
    st.subheader("History")
    choice = st.radio("Show", list(FILTERS), format_func=FILTERS.__getitem__, horizontal=True, key=keys.AUDIT_FILTER)
    flag = {"all": None, "flagged": True, "unflagged": False}[str(choice)]
    total, records = reader.history(limit=HISTORY_ROWS, flag=flag)
    st.dataframe(history_frame(records), hide_index=True)
    st.caption(f"The newest {len(records):,} of {total:,} matching audits (the service's GET /history pages them all).")
    return records


def draw_record(reader: AuditReader, records: list[dict]) -> None:
    st.subheader("One record")
    if not records:
        st.info("No audit matches the filter.")
        return
    labels = {r["id"]: record_label(r) for r in records}
    chosen = st.selectbox("Record", list(labels), format_func=labels.__getitem__, key=keys.AUDIT_RECORD)
    record = reader.get(str(chosen))
    if record is None:
        st.warning("That record is no longer in the database.")
        return
    calibration = reader.calibration(str(as_dict(record.get("calibration")).get("id", "")))
    st.plotly_chart(record_trajectory_figure(record, calibration), key=keys.scoped(keys.AUDIT_TRAJECTORY, chosen))
    if calibration is None:
        st.caption("The calibration this record was scored with is not in the database: no band drawn.")
    else:
        st.caption(
            f"Grey band: μ ± 2σ of calibration {plain_message(str(calibration.get('id', '')))} "
            f"({plain_message(str(calibration.get('source', '')))}); "
            "red crosses: the layers this record had outside it."
        )
    left, right = st.columns(2)
    left.dataframe(record_facts(record), hide_index=True)
    inputs = as_dict(record.get("inputs"))
    with right:
        if "query" in inputs:
            st.markdown("**Query**")
            st.text(str(inputs["query"]))  # stored text is shown as text, never as markdown
            st.markdown("**Context**")
            st.text(str(inputs.get("context", "")))
        else:
            st.caption("The service ran with --no-store-text: only the inputs' SHA-256 are kept.")
        q_hash, c_hash = (plain_message(str(inputs.get(k) or ""))[:16] for k in ("query_sha256", "context_sha256"))
        st.caption(f"SHA-256 of the query {q_hash}…, of the context {c_hash}…")


def main() -> None:
    open_page("Audit log", early=early)
    if reader is None:
        return
    try:
        if not draw_chain(reader):
            return
        draw_counters(reader)
        draw_rate(reader)
        st.divider()
        records = draw_history(reader)
        draw_record(reader, records)
    except ValueError as exc:
        st.error("Could not read the audit database. " + plain_message(str(exc)))


main()
