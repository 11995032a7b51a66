"""Every picture the README shows is from the current code and readable at README width (issue 45: a 1440 × 7000
capture from an older version, with "log-probability −8.45" where a run now says −25.34 and no answer-span line).

``make screenshots`` writes each picture with a JSON file of the text it shows (``docs/screenshot.json``: the inputs,
both answers, the verdict's title and sentence, the answer-span line; :mod:`tests.e2e.readme_image`). The fast test
checks that every README picture has one, its size, and that the span line has the words the page writes today; the
slow one runs the embedded model on the same inputs and checks that the current code says the same (numbers within
0.02, the last printed digit being the only thing a CPU's kernels may move): a change to the model, the scoring, the
headline or its words fails it until ``make screenshots`` is run again (CONTRIBUTING.md#readme-images).
"""

from __future__ import annotations

import ast
import json
import re
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_WIDTH, MAX_HEIGHT = 1280, 1400
NUMBER = re.compile(r"[−-]?\d+(?:\.\d+)?")


def _images() -> list[Path]:
    return [ROOT / p for p in re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", README.read_text(encoding="utf-8"))]


def _size(png: Path) -> tuple[int, int]:
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _text(png: Path) -> dict:
    sidecar = png.with_suffix(".json")
    assert sidecar.is_file(), f"{png.name} has no {sidecar.name}: run `make screenshots`"
    return json.loads(sidecar.read_text(encoding="utf-8"))


def _span_line_words() -> list[str]:
    """The fixed words of the page's answer-span line: the constant parts of the f-strings in
    ``components.panels.draw_span`` (read from the source, so a change of wording there is seen here)."""
    tree = ast.parse((ROOT / "components" / "panels.py").read_text(encoding="utf-8"))
    draw = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "draw_span")
    words: list[str] = []
    for node in ast.walk(draw):
        if isinstance(node, ast.JoinedStr):
            words += [v.value.replace("**", "").strip(" —.:“”(") for v in node.values if isinstance(v, ast.Constant)]
    return [w for w in words if len(w) > 8 and "Content words" not in w and "none —" not in w]


def test_every_readme_picture_is_readable_and_says_what_it_shows() -> None:
    images = _images()
    assert images, "the README shows a picture of the app"
    for png in images:
        assert png.is_file(), png
        width, height = _size(png)
        assert width <= MAX_WIDTH and height <= MAX_HEIGHT, f"{png.name} is {width} × {height}: crop it"
        text = _text(png)
        assert {"query", "context", "max_new_tokens", "answers", "title", "reason", "span_line"} <= set(text)


def test_the_pictures_span_line_has_todays_words() -> None:
    words = _span_line_words()
    assert any("Both axes read the run at this span" in w for w in words), words
    for png in _images():
        line = _text(png)["span_line"]
        missing = [w for w in words if w not in line]
        assert not missing, f"{png.name} shows an older answer-span line (missing {missing}): run `make screenshots`"


def _same(shown: str, now: str) -> bool:
    """Equal text, numbers within 0.02 (a CPU's kernels may move the last printed digit)."""
    a, b = " ".join(shown.split()), " ".join(now.split())
    if NUMBER.sub("#", a) != NUMBER.sub("#", b):
        return False
    pairs = zip(NUMBER.findall(a), NUMBER.findall(b))
    return all(abs(float(x.replace("−", "-")) - float(y.replace("−", "-"))) <= 0.02 + 1e-9 for x, y in pairs)


def test_number_tolerant_comparison() -> None:
    assert _same("log-probability −25.34 nats", "log-probability  −25.35 nats")
    assert not _same("log-probability −8.45 nats", "log-probability −25.34 nats")
    assert not _same("Read from the context", "Recalled from memory")


@pytest.mark.slow
def test_the_readme_picture_is_what_the_current_code_shows(embedded_handle) -> None:
    from core.engine.axes import headline
    from core.engine.dual_path import run_dual_path
    from core.engine.settings import DualPathSettings

    for png in _images():
        text = _text(png)
        settings = DualPathSettings(max_new_tokens=int(text["max_new_tokens"]))
        result = run_dual_path(embedded_handle, text["query"], text["context"], settings)
        head = headline(result)
        stale = f"{png.name} is from an older version: run `make screenshots`"
        assert text["answers"]["retrieval"] == result.retrieval.answer.strip(), stale
        assert text["answers"]["parametric"] == result.parametric.answer.strip(), stale
        assert text["title"] == head.title, stale
        assert _same(text["reason"], head.reason), (stale, text["reason"], head.reason)
        obs = head.span or {}
        shown = [float(n.replace("−", "-")) for n in NUMBER.findall(text["span_line"])]
        for key in ("kl", "lp_retrieval", "lp_parametric", "llr"):
            if obs.get(key) is not None:
                assert any(abs(n - obs[key]) <= 0.02 for n in shown), (stale, key, obs[key], text["span_line"])
