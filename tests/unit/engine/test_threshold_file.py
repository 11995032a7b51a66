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


# -- issue 37 C: every field checked before the τ is used anywhere --------------------------------------------------


def _bundled_with(**length_tau) -> bytes:
    import json

    from core.engine.threshold import EMBEDDED_THRESHOLD

    data = json.loads(EMBEDDED_THRESHOLD.read_text(encoding="utf-8"))
    data["length_tau"].update(length_tau)
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("length_tau", "message"),
    [
        ({"intercept": -800.0}, "τ would be 0"),  # τ(L) = 0: every answer "read"
        ({"intercept": 800.0}, "overflow"),  # was `unexpected OverflowError`
        ({"intercept": 705.0}, "overflow"),  # finite at L = 1, infinite at long answers
        ({"boot_intercept": [900.0] * 200}, "A bootstrap fit"),
        ({"boot_slope": [1.5] * 200}, "boot_slope"),
        ({"L_max": 10**6}, "L_max"),
        ({"seed": 10**30}, "length_tau.seed"),
        ({"form": "x" * 5000}, "length_tau.form"),
    ],
)
def test_a_length_model_that_is_not_a_finite_positive_tau_everywhere_is_refused(length_tau, message):
    with pytest.raises(ValueError, match=message):
        Threshold.from_json_bytes(_bundled_with(**length_tau))


def test_the_bundled_threshold_still_loads_and_holds_at_every_length():
    from core.engine.threshold import EMBEDDED_THRESHOLD, MAX_SCORED_LENGTH

    th = Threshold.load(EMBEDDED_THRESHOLD)
    for n in (1, th.length_tau.L_min, th.length_tau.L_max, MAX_SCORED_LENGTH):
        low, high = th.length_tau.band(n)
        assert 0 < low <= th.length_tau.tau(n) <= high < float("inf")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"tau": 1, "T": 4, "model": "m", "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}", "levels deep"),
        (b"[" * 60_000, "levels deep"),  # was `unexpected RecursionError`
        (b'{"tau": 1, "T": ' + b"9" * 5000 + b', "model": "m"}', "not a threshold's JSON"),
        (b'{"tau": 1, "T": 100000, "model": "m"}', "'T' must be a positive integer"),
        (b'{"tau": 1, "T": 4, "model": "' + b"m" * 3000 + b'"}', "'model' is 3,000 characters"),
        (b'{"tau": 1, "T": 4, "model": "m", "fpr": 1.5}', "'fpr' is a rate"),
        (b'{"tau": 1, "T": 4, "model": "m", "epsilon": 0}', "'epsilon' must lie in"),
        (b'{"tau": 1, "T": 4, "model": "m", "n_clean": 1e3}', "'n_clean' must be an integer"),
    ],
)
def test_sizes_depth_and_ranges_of_every_field_are_bounded(text, message):
    with pytest.raises(ValueError, match=message):
        Threshold.from_json_bytes(text)


def test_a_session_threshold_dict_is_checked_too():
    """The app keeps a chosen τ as a dict and reads it back through ``from_dict``: the same checks apply."""
    deep: list = []
    inner = deep
    for _ in range(100):
        inner.append([])
        inner = inner[0]
    with pytest.raises(ValueError, match="'extra' nests"):
        Threshold.from_dict({"tau": 1.0, "T": 4, "model": "m", "extra": {"x": deep}})
