"""The Evaluate page's τ upload refuses a threshold file that is not a finite, positive τ at every length, or that
is nested thousands deep (issue 37 C): before, such a file was loaded — "Use the loaded τ" then crashed the page
and every Dual Path run — or raised a page exception on upload."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from components import keys
from core.engine.threshold import EMBEDDED_THRESHOLD
from tests.app.conftest import APP, ok

EVALUATE = "pages/9_Evaluate.py"


def _length_tau(model: str, **fields) -> bytes:
    data = json.loads(EMBEDDED_THRESHOLD.read_text(encoding="utf-8"))
    data["model"] = model
    data["length_tau"].update(fields)
    return json.dumps(data).encode()


FILES = [
    pytest.param(lambda m: _length_tau(m, intercept=-800.0), "τ would be 0", id="intercept-minus-800"),
    pytest.param(lambda m: _length_tau(m, intercept=800.0), "overflow", id="intercept-plus-800"),
    pytest.param(
        lambda m: b'{"tau": 1, "T": 4, "model": "m", "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "levels deep",
        id="nested-5000",
    ),
]


@pytest.mark.parametrize(("data", "message"), FILES)
def test_a_tau_that_is_not_finite_and_positive_everywhere_is_not_loaded(tiny_app, data, message) -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    ok(at.run().switch_page(EVALUATE).run())
    upload = ("tau.json", data(tiny_app.info.name), "application/json")
    ok(at.file_uploader(key=keys.EVAL_TAU_UPLOAD).set_value(upload).run())
    errors = re.sub(r"\\(.)", r"\1", "\n".join(str(e.value) for e in at.error))
    assert "The τ was not loaded" in errors and message in errors, errors
    assert not any(b.key == keys.EVAL_USE_LOADED_TAU for b in at.button)
    assert not at.session_state[keys.THRESHOLDS], "no τ applied"
