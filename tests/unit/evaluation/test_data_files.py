"""Issue 17 (hardening), labeled CSVs: special files (5), an unterminated quote, NUL characters, duplicate rows
and sizes in MiB (11) — for files read by path (command line) and for uploaded bytes (the Evaluate page)."""

from __future__ import annotations

import pytest

from core.evaluation import DataError, parse_labeled_bytes, parse_labeled_csv, read_conflict_csv, read_labeled_csv
from core.evaluation.data import MAX_BYTES, decode_csv_bytes
from tests.helpers import dev_zero, error_in_time, named_pipe

GOOD = "query,context,label\nq1,c1,memorized\nq2,c2,grounded\n"


def test_a_folder_as_csv_is_a_clear_data_error(tmp_path):
    with pytest.raises(DataError, match=r"is a folder, not a regular file"):
        read_labeled_csv(tmp_path)
    with pytest.raises(DataError, match=r"is a folder, not a regular file"):
        read_conflict_csv(tmp_path)


def test_dev_zero_as_csv_is_refused_not_read():
    zero = dev_zero()
    error = error_in_time(lambda: read_labeled_csv(zero))
    assert isinstance(error, DataError) and "not a regular file" in str(error)


def test_a_named_pipe_as_csv_does_not_hang(tmp_path):
    fifo = named_pipe(tmp_path, "rows.csv")
    error = error_in_time(lambda: read_labeled_csv(fifo))
    assert isinstance(error, DataError) and "named pipe" in str(error)


def test_an_unterminated_quote_is_reported_with_its_line():
    text = 'query,context,label\nq1,c1,memorized\nq2,"the quote never closes,grounded\nq3,c3,grounded\n'
    with pytest.raises(DataError, match=r"^Line 3: .*never closed.*unterminated quote"):
        parse_labeled_csv(text)
    with pytest.raises(DataError, match=r"^Line 3: "):
        parse_labeled_bytes(text.encode())


def test_quoted_fields_with_commas_newlines_and_doubled_quotes_still_parse():
    text = 'query,context,label\n"a, b","line one\nline ""two""",grounded\nq,c,memorized\n'
    rows = parse_labeled_csv(text)
    assert rows[0].query == "a, b" and rows[0].context == 'line one\nline "two"'
    assert rows.notes == []


def test_nul_characters_are_removed_with_a_note_naming_the_rows():
    text = "query,context,label\nq1,c\x001,memorized\nq2,c2,grounded\nq\x003,c3,grounded\n"
    rows = parse_labeled_csv(text)
    assert [r.context for r in rows] == ["c1", "c2", "c3"] and rows[2].query == "q3"
    assert any("NUL" in n and "1, 3" in n for n in rows.notes), rows.notes
    uploaded = parse_labeled_bytes(text.encode())
    assert uploaded.notes == rows.notes


def test_duplicate_rows_are_counted_in_a_note():
    text = (
        "query,context,label\n"
        "q1,c1,memorized\nq2,c2,grounded\nq1,c1,memorized\nq1, c1 ,memorized\nq2,c2,memorized\nq3,c3,grounded\n"
    )
    rows = parse_labeled_csv(text)
    assert len(rows) == 6  # nothing is dropped
    duplicate = [n for n in rows.notes if "duplicate" in n]
    assert duplicate and duplicate[0].startswith("3 duplicate row(s)") and "3, 4, 5" in duplicate[0]
    assert any("another label" in n and "5" in n for n in rows.notes)


def test_clean_files_have_no_notes(tmp_path):
    path = tmp_path / "good.csv"
    path.write_text(GOOD)
    assert read_labeled_csv(path).notes == []


def test_size_limits_are_printed_in_mib():
    data = b"x" * (2 * 1024 * 1024 + 10)
    with pytest.raises(DataError, match=r"is 2\.0 MiB; the limit is 1 MiB|is 2 MiB; the limit is 1 MiB"):
        decode_csv_bytes(data, name="up.csv", max_bytes=1024 * 1024)
    assert MAX_BYTES == 20 * 1024 * 1024


def test_an_oversized_file_on_disk_is_refused_in_mib(tmp_path):
    path = tmp_path / "big.csv"
    with path.open("wb") as fh:
        fh.truncate(MAX_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(DataError, match=r"the limit is 20 MiB"):
        read_labeled_csv(path)


def test_a_zero_width_query_is_refused_naming_its_own_column(tiny_handle):
    """Issue 37 F: a query of zero-width characters passed the parser and was then refused as column 'context'."""
    from core.engine import DualPathSettings
    from core.evaluation.data import LabeledRow, prompt_lengths

    data = "query,context,label\n\u200b\u200b,Paris is the capital of France.,grounded\n".encode()
    with pytest.raises(DataError, match=r"Row 1, column 'query': empty \(zero-width"):
        parse_labeled_bytes(data, name="z.csv")
    rows = [LabeledRow(1, "Who?", "Ada.", "grounded"), LabeledRow(2, "\u2060\u200b", "Ada.", "grounded")]
    with pytest.raises(DataError, match=r"Row 2, column 'query': The query is empty"):
        prompt_lengths(tiny_handle, rows, DualPathSettings(max_new_tokens=2, score_window=2))


def test_records_are_checked_and_noted_as_a_files_rows_are():
    """The notebook's DataFrame rows go through the file's checks: the same refusals and the same notes."""
    import math

    from core.evaluation.data import DataError, record_rows

    records = [
        {"query": "Who?", "context": "Ann\0 did.", "label": "grounded", "source": None},
        {"query": "Who?", "context": "Ann did.", "label": "memorized", "source": math.nan},
        {"query": "Where?", "context": "Paris.", "label": "Grounded", "source": 3},
    ]
    rows = record_rows(records, labeled=True)
    assert [r.row for r in rows] == [1, 2, 3] and rows[0].context == "Ann did."
    assert rows[2].label == "grounded" and rows[2].extra == {"source": "3"} and rows[1].extra == {"source": ""}
    assert any("NUL" in n and "1" in n for n in rows.notes)
    assert any("duplicate" in n for n in rows.notes) and any("another label" in n for n in rows.notes)
    with pytest.raises(DataError, match="Row 2, column 'label'"):
        record_rows([records[0], {**records[1], "label": "maybe"}], labeled=True)
    assert record_rows([{"query": "Q?", "context": "C."}], labeled=False)[0].label == ""
    with pytest.raises(DataError, match="Row 1, column 'context': empty"):
        record_rows([{"query": "Q?", "context": "\u200b"}], labeled=False)
    with pytest.raises(DataError, match="Too many rows"):
        record_rows([{"query": "Q?", "context": "C."}] * 3, labeled=False, max_rows=2)


def test_the_notebooks_rows_warn_what_a_files_parse_notes():
    import pandas as pd

    from read_or_recall.lab import _rows

    frame = pd.DataFrame({"query": ["Who?", "Who?"], "context": ["Ann did.", "Ann did."]})
    with pytest.warns(UserWarning, match="duplicate"):
        rows = _rows(frame, labeled=False)
    assert len(rows) == 2
