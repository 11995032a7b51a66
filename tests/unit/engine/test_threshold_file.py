"""Issue 17 (hardening), item 5: a threshold file is read as a regular file with a cap (folder, device, pipe
refused; no hang, no unbounded read)."""

from __future__ import annotations

import pytest

from core.engine.threshold import Threshold
from tests.helpers import dev_zero, error_in_time, named_pipe


def test_a_good_threshold_file_still_loads(tmp_path):
    path = tmp_path / "tau.json"
    path.write_text('{"tau": 3.5, "T": 16, "model": "m"}')
    assert Threshold.load(path).tau == 3.5


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"threshold file .* is a folder"):
        Threshold.load(tmp_path)


def test_dev_zero_is_refused_without_reading():
    zero = dev_zero()
    error = error_in_time(lambda: Threshold.load(zero))
    assert isinstance(error, ValueError) and "is a device, not a regular file" in str(error)


def test_a_named_pipe_does_not_hang(tmp_path):
    fifo = named_pipe(tmp_path, "tau.json")
    error = error_in_time(lambda: Threshold.load(fifo))
    assert isinstance(error, ValueError) and "named pipe" in str(error)


def test_an_oversized_file_is_refused_in_kib(tmp_path):
    path = tmp_path / "tau.json"
    with path.open("wb") as fh:
        fh.truncate(10 * 1024 * 1024)
    with pytest.raises(ValueError, match=r"the limit is 64 KiB"):
        Threshold.load(path)
