"""Issue 17 (hardening), core.io: user files read safely (5), output locations checked first (2), CSV cells
neutralized (9), atomic writes with unique temporary names (3) and the user's umask (10)."""

from __future__ import annotations

import csv
import io
import os
import re
import stat
import threading
from pathlib import Path

import pytest

import core.io
from core.io import (
    MiB,
    UserFileError,
    atomic_write_npz,
    atomic_write_text,
    check_output_path,
    csv_safe_cell,
    csv_safe_text,
    format_size,
    read_user_file,
)
from tests.helpers import call_in_time, dev_zero, named_pipe

# ----------------------------------------------------------------------------------------------------------
# 5. special files


def test_a_regular_file_is_read_whole(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"query,context,label\n")
    assert read_user_file(path, 100, "CSV file") == b"query,context,label\n"


def test_a_folder_is_refused_by_name(tmp_path):
    with pytest.raises(UserFileError, match=r"is a folder, not a regular file"):
        read_user_file(tmp_path, 100, "CSV file")


def test_dev_zero_is_refused_without_reading_it():
    zero = dev_zero()
    box = call_in_time(lambda: read_user_file(zero, 20 * MiB, "CSV file"))
    assert isinstance(box.get("error"), UserFileError)
    assert "is a device, not a regular file" in str(box["error"])


def test_a_named_pipe_is_refused_and_does_not_hang(tmp_path):
    fifo = named_pipe(tmp_path, "pipe.csv")  # no writer: a plain open() for reading would block forever
    box = call_in_time(lambda: read_user_file(fifo, 100, "threshold file"))
    assert isinstance(box.get("error"), UserFileError)
    assert "named pipe" in str(box["error"])


def test_missing_file_names_it(tmp_path):
    with pytest.raises(UserFileError, match=r"does not exist"):
        read_user_file(tmp_path / "nope.csv", 100)


def test_the_cap_is_enforced_by_reading_not_by_st_size(tmp_path, monkeypatch):
    """A file whose st_size says 0 (as /proc files and devices do) is still cut off at the cap."""
    path = tmp_path / "big.csv"
    path.write_bytes(b"x" * 5000)
    real_fstat = os.fstat

    def lying_fstat(fd):
        st = real_fstat(fd)
        fields = list(st)
        fields[stat.ST_SIZE] = 0
        return os.stat_result(fields)

    monkeypatch.setattr(core.io.os, "fstat", lying_fstat)
    with pytest.raises(UserFileError, match=r"over 4 KiB; the limit is 4 KiB"):
        read_user_file(path, 4096, "CSV file")
    assert len(read_user_file(path, 5000, "CSV file")) == 5000  # exactly the cap is fine


def test_sizes_are_printed_in_the_binary_unit_they_are_computed_in(tmp_path):
    assert format_size(20 * MiB) == "20 MiB"
    assert format_size(64 * 1024) == "64 KiB"
    assert format_size(int(1.5 * MiB)) == "1.5 MiB"
    assert format_size(12) == "12 bytes"
    path = tmp_path / "big.json"
    path.write_bytes(b"{" * (3 * MiB))
    with pytest.raises(UserFileError, match=r"is 3 MiB; the limit is 2 MiB"):
        read_user_file(path, 2 * MiB, "report file")


# ----------------------------------------------------------------------------------------------------------
# 2. output locations


def test_output_under_a_regular_file_is_refused(tmp_path):
    blocker = tmp_path / "result.json"
    blocker.write_text("{}")
    with pytest.raises(UserFileError, match=r"is a file, not a folder"):
        check_output_path(blocker / "out.json", "--out file")
    with pytest.raises(UserFileError, match=r"is a file, not a folder"):
        check_output_path(blocker / "deeper" / "out.json", "--out file")


def test_output_that_is_a_folder_or_empty_is_refused(tmp_path):
    with pytest.raises(UserFileError, match=r"is a folder"):
        check_output_path(tmp_path)
    with pytest.raises(UserFileError, match=r"empty"):
        check_output_path("")


def test_output_in_an_unwritable_folder_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "ro" / "out.json"
    target.parent.mkdir()
    if os.geteuid() != 0:
        target.parent.chmod(0o500)
    else:  # root writes anywhere: simulate the permission check's answer
        monkeypatch.setattr(core.io.os, "access", lambda path, mode: Path(path) != target.parent)
    try:
        with pytest.raises(UserFileError, match=r"not writable"):
            check_output_path(target, "--out file")
    finally:
        target.parent.chmod(0o700)


def test_a_new_file_in_new_folders_is_fine(tmp_path):
    assert check_output_path(tmp_path / "a" / "b" / "out.json") == tmp_path / "a" / "b" / "out.json"


# ----------------------------------------------------------------------------------------------------------
# 9. CSV formulas


@pytest.mark.parametrize("text", ["=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx", '=HYPERLINK("x")'])
def test_formula_like_text_gets_an_apostrophe(text):
    assert csv_safe_cell(text) == "'" + text


@pytest.mark.parametrize("value", ["-1.5", "-3", "+2", "-inf", "1e-3", -1.5, 3, None, "plain", "a=b", ""])
def test_numbers_and_plain_text_are_unchanged(value):
    assert csv_safe_cell(value) == value


def test_csv_text_is_neutralized_cell_by_cell_and_numbers_stay_numbers():
    import pandas as pd

    frame = pd.DataFrame(
        {"query": ["=cmd()", "ok", "@me"], "z": [-1.25, 2.0, -0.5], "answer": ["-x", "+", "multi\nline, quoted"]}
    )
    safe = csv_safe_text(frame.to_csv(index=False))
    rows = list(csv.reader(io.StringIO(safe)))
    assert rows[0] == ["query", "z", "answer"]
    assert [r[0] for r in rows[1:]] == ["'=cmd()", "ok", "'@me"]
    assert [r[1] for r in rows[1:]] == ["-1.25", "2.0", "-0.5"]  # negative numbers are not text
    assert [r[2] for r in rows[1:]] == ["'-x", "'+", "multi\nline, quoted"]
    back = pd.read_csv(io.StringIO(safe))
    assert back["z"].tolist() == [-1.25, 2.0, -0.5]


def test_csv_text_without_formulas_is_returned_as_is():
    text = 'a,b\n1,-2\nx,"y, z"\n'
    assert csv_safe_text(text) is text


def test_the_download_helper_neutralizes_csv_but_not_json():
    from components import widgets

    class Box:
        def __init__(self) -> None:
            self.calls: list[dict] = []

        def download_button(self, label, **kwargs):
            self.calls.append(kwargs)

    box = Box()
    widgets.download(box, "csv", "query,z\n=1+1,-3\n", "rows.csv")
    widgets.download(box, "json", '{"query": "=1+1"}', "rows.json")
    assert box.calls[0]["data"] == "query,z\n'=1+1,-3\n"
    assert box.calls[1]["data"] == '{"query": "=1+1"}'


# ----------------------------------------------------------------------------------------------------------
# 3 and 10. atomic writes


def test_concurrent_writers_of_one_file_never_collide(tmp_path):
    target = tmp_path / "basis.json"
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for _ in range(20):
                atomic_write_text(target, f"writer {i}\n" * 1000)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    lines = target.read_text().splitlines()
    assert len(lines) == 1000 and len(set(lines)) == 1  # one writer's whole file, never a mix
    assert [p.name for p in tmp_path.iterdir()] == ["basis.json"]  # no temporary file left


def test_written_files_follow_the_umask_not_mkstemp_0600(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "tau.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_an_npz_is_written_atomically_and_reads_back_without_pickles(tmp_path):
    import numpy as np

    arrays = {"pc1": np.arange(6, dtype=np.float32).reshape(2, 3), "meta_json": np.array('{"k": 2}')}
    path = atomic_write_npz(tmp_path / "sub" / "basis.npz", arrays)
    with np.load(path, allow_pickle=False) as data:
        assert sorted(data.files) == ["meta_json", "pc1"]
        np.testing.assert_array_equal(data["pc1"], arrays["pc1"])
        assert data["pc1"].dtype == np.float32 and str(data["meta_json"]) == '{"k": 2}'
    assert [p.name for p in path.parent.iterdir()] == ["basis.npz"], "no temporary file left behind"


def test_a_json_record_round_trips_and_names_its_kind_in_every_error(tmp_path) -> None:
    """The one JSON record mixin (the combined model, the Lookback Lens classifier, the ReDeEP choice)."""
    from dataclasses import dataclass

    @dataclass
    class Fit(core.io.JsonRecord):
        KIND = "test fit"
        VERSION = 3

        name: str
        coef: list
        version: int = 3

    fit = Fit(name="m", coef=[0.5, -1.0])
    path = fit.save(tmp_path / "fit.json")
    assert Fit.load(path) == fit and Fit.from_dict({**fit.to_dict(), "extra": 1}) == fit
    for data, words in (
        ([1], "a test fit file holds one JSON object"),
        ({"name": "m", "coef": [], "version": 2}, "test fit version 2 (this code reads 3)"),
        ({"coef": [], "version": 3}, "test fit file: "),
    ):
        with pytest.raises(ValueError, match=re.escape(words)):
            Fit.from_dict(data)
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot read test fit"):
        Fit.load(tmp_path / "bad.json")


def test_package_files_finds_an_installed_folder_and_names_what_is_missing(tmp_path, monkeypatch):
    package = tmp_path / "ror_fake_data_pkg"
    (package / "model").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model" / "config.json").write_text("{}")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = core.io.package_files(
        "ror_fake_data_pkg", ("config.json",), under="model", error=LookupError, install="-", reinstall="-"
    )
    assert found == package / "model"
    with pytest.raises(LookupError, match=r"weights\.bin is missing from .*; reinstall it\."):
        core.io.package_files(
            "ror_fake_data_pkg",
            ("config.json", "weights.bin"),
            under="model",
            error=LookupError,
            install="-",
            reinstall="reinstall it",
        )
    with pytest.raises(LookupError, match=r"^pip install it$"):
        core.io.package_files("ror_not_installed_pkg", (), error=LookupError, install="pip install it", reinstall="-")
