"""AppTest of the Audit log page: it reads the audit database read-only (``READ_OR_RECALL_AUDIT_DB``) and shows
the chain's status, the counters, the rate, the history and one record's trajectory."""

from __future__ import annotations

import sqlite3

import pytest
from streamlit.testing.v1 import AppTest

from components import keys
from core.audit.store import AuditStore, Entry, verify_chain
from tests.app.conftest import ROOT

PAGE = str(ROOT / "pages" / "10_Audit_Log.py")
MU = [0.0, 0.1, 0.2, 0.3]
SIGMA = [0.0, 0.05, 0.05, 0.1]


def _fill(path, n=6):
    store = AuditStore(path)
    store.register_calibration({"id": "cal-1", "mu": MU, "sigma": SIGMA, "kept_layers": [3], "source": "clean.csv"})
    entries = []
    for i in range(n):
        flag = i % 3 == 0
        result = {
            "anomaly_flag": flag,
            "anomaly_score": 3.0 if flag else 0.5,
            "lts_trajectory": [0.0, 0.1, 0.45 if flag else 0.2, 0.3],
            "flagged_layers": [2] if flag else [],
            "first_token": {"kl": 0.2, "top_retrieval": "Mar", "top_parametric": "The"},
            "latency_ms": 40.0 + i,
            "batch_size": 1,
        }
        body = {
            "inputs": {"query_sha256": "a" * 64, "context_sha256": "b" * 64, "query": f"query {i}", "context": "ctx"},
            "result": result,
            "model": {"name": "tiny-random-llama"},
            "calibration": {"id": "cal-1"},
        }
        entries.append(Entry(body, flag, result["anomaly_score"], result["latency_ms"], "tiny-random-llama", "cal-1"))
    records = store.append(entries)
    store.close()
    return records


def _texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [str(x.value) for x in at.metric]
    return "\n".join(str(p) for p in parts)


@pytest.mark.usefixtures("tiny_app")
def test_audit_log_page_reads_the_database_and_flags_a_broken_chain(tmp_path, monkeypatch):
    db = tmp_path / "audit.sqlite3"
    monkeypatch.setenv("READ_OR_RECALL_AUDIT_DB", str(db))
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.exception, at.exception
    assert any("No audit database" in i.value for i in at.info)

    records = _fill(db)
    at.run()
    assert not at.exception, at.exception
    assert any("Hash chain verified: 6 records" in s.value for s in at.success)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Audits"] == "6" and metrics["Flagged"] == "2" and metrics["Anomaly rate"] == "33.3%"
    assert len(at.dataframe) >= 2 and len(at.dataframe[0].value) == 6
    assert at.selectbox(key=keys.AUDIT_RECORD).value == records[-1]["id"]  # newest first
    assert "READ_OR_RECALL_AUDIT_DB" in _texts(at)

    at.radio(key=keys.AUDIT_FILTER).set_value("flagged").run()
    assert len(at.dataframe[0].value) == 2
    at.selectbox(key=keys.AUDIT_RECORD).set_value(records[0]["id"]).run()
    assert not at.exception, at.exception
    facts = at.dataframe[1].value
    assert facts.set_index("field").loc["flagged layers (outside μ ± 2σ)", "value"] == "1"  # row 2 = decoder layer 1
    assert len(at.get("plotly_chart")) == 2

    conn = sqlite3.connect(db)
    conn.execute("UPDATE audits SET anomaly_flag = 0 WHERE seq = 4")
    conn.commit()
    conn.close()
    at.run()
    assert any("BROKEN (changed)" in e.value and records[3]["id"] in e.value for e in at.error)
    assert not verify_chain(db).ok


@pytest.mark.usefixtures("tiny_app")
def test_public_mode_hides_the_audit_log_unless_the_operator_opts_in(tmp_path, monkeypatch):
    """Issue 25 item 1: with READ_OR_RECALL_PUBLIC=1 any visitor could read every stored query and context."""
    db = tmp_path / "audit.sqlite3"
    _fill(db)
    monkeypatch.setenv("READ_OR_RECALL_AUDIT_DB", str(db))
    monkeypatch.setenv("READ_OR_RECALL_PUBLIC", "1")
    monkeypatch.delenv("READ_OR_RECALL_PUBLIC_AUDIT_LOG", raising=False)
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.exception, at.exception
    shown = _texts(at) + "\n".join(i.value for i in at.info) + "\n".join(str(d.value) for d in at.dataframe)
    assert "query 0" not in shown and "ctx" not in shown
    assert not at.metric and not at.dataframe and not at.get("plotly_chart") and not at.success
    assert any("READ_OR_RECALL_PUBLIC_AUDIT_LOG" in i.value for i in at.info)

    monkeypatch.setenv("READ_OR_RECALL_PUBLIC_AUDIT_LOG", "1")  # the operator's explicit opt-in
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.exception, at.exception
    assert any("Hash chain verified: 6 records" in s.value for s in at.success)
    assert any("public" in w.value.lower() for w in at.warning)


# -- issue 37 E: damaged and tampered files -----------------------------------------------------------------------


def _zero_page(path, name=None):
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    page = (
        conn.execute("PRAGMA page_count").fetchone()[0]
        if name is None
        else conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    )
    conn.close()
    with open(path, "r+b") as fh:
        fh.seek((page - 1) * size)
        fh.write(bytes(size))


def _sql(path, statement):
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()


@pytest.mark.usefixtures("tiny_app")
@pytest.mark.parametrize("name", ["audits_flag", None], ids=["index-page", "data-page"])
def test_a_damaged_database_is_named_damaged_never_verified(tmp_path, monkeypatch, name):
    """A zeroed index page showed "Hash chain verified"; a zeroed data page raised an uncaught exception."""
    db = tmp_path / "audit.sqlite3"
    _fill(db, n=40)
    _zero_page(db, name)
    monkeypatch.setenv("READ_OR_RECALL_AUDIT_DB", str(db))
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.exception, at.exception
    assert not at.success and any("DAMAGED" in e.value for e in at.error), [e.value for e in at.error]


@pytest.mark.usefixtures("tiny_app")
@pytest.mark.parametrize(
    ("statement", "shown"),
    [
        ("DROP TABLE calibrations", "BROKEN (deleted)"),
        ("UPDATE audits SET record = CAST(X'7B22FF223A317D' AS TEXT) WHERE seq = 2", "BROKEN (changed)"),
        ("UPDATE audits SET anomaly_score = 'high', ts = 'yesterday' WHERE seq = 3", "BROKEN (changed)"),
    ],
    ids=["dropped-table", "not-utf8", "text-in-numbers"],
)
def test_a_tampered_database_is_shown_broken_without_an_exception(tmp_path, monkeypatch, statement, shown):
    """``DROP TABLE calibrations`` and bytes that are not UTF-8 raised uncaught exceptions on the page."""
    db = tmp_path / "audit.sqlite3"
    _fill(db)
    _sql(db, statement)
    monkeypatch.setenv("READ_OR_RECALL_AUDIT_DB", str(db))
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.exception, at.exception
    assert any(shown in e.value for e in at.error), [e.value for e in at.error]
    for seq in (2, 3):  # the tampered records themselves can be opened
        record = next(r for r in AuditStore(db).history(limit=10)[1] if r["seq"] == seq)
        at.selectbox(key=keys.AUDIT_RECORD).set_value(record["id"]).run()
        assert not at.exception, at.exception


@pytest.mark.usefixtures("tiny_app")
def test_stored_text_is_shown_as_text_not_markdown(tmp_path, monkeypatch):
    """Markdown in a tampered calibration id was rendered in the band's caption."""
    db = tmp_path / "audit.sqlite3"
    _fill(db)
    hostile = "**bold** [a link](https://example.com) :red[alarm]"
    _sql(db, f"UPDATE calibrations SET id = '{hostile}', description = replace(description, 'cal-1', '{hostile}')")
    _sql(db, f'UPDATE audits SET record = replace(record, \'"id":"cal-1"\', \'"id":"{hostile}"\')')
    monkeypatch.setenv("READ_OR_RECALL_AUDIT_DB", str(db))
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert not at.exception, at.exception
    band = [c.value for c in at.caption if c.value.startswith("Grey band")]
    assert band and hostile not in band[0] and "\\*\\*bold\\*\\*" in band[0] and "\\[a link\\]" in band[0]
