"""The public notebook API (read_or_recall) on the tiny random model: one word for one verdict, the same figures as the
pages, the detectors as a grouped DataFrame, escaped HTML, evaluate with a registered detector, and no Streamlit."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import read_or_recall as rr
from core.detectors import CONTEXT_RELIANCE, GROUNDED_HIGH, DetectorThreshold
from core.detectors.registry import GROUPS
from core.engine import DualPathSettings
from core.engine.result import DualPathResult

REPO = Path(__file__).resolve().parents[3]
SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6, top_k=5)


@pytest.fixture(scope="module")
def lab(tiny_handle):
    return rr.Lab(handle=tiny_handle, settings=SETTINGS)


@pytest.fixture(scope="module")
def run(lab):
    return lab.run("Who wrote it?", "Ada wrote it.")


def test_verdict_is_the_headline_everywhere_and_repcs_keeps_its_own(run):
    data = json.loads(run.to_json())
    assert run.verdict == run.result.verdict == run.axes["verdict"] == data["verdict"] == data["axes"]["verdict"]
    assert run.repcs_verdict == run.result.repcs_verdict == data["repcs_verdict"]
    assert run.reason == run.result.verdict_reason == data["verdict_reason"]
    assert run.repcs_reason == data["repcs_verdict_reason"]
    back = DualPathResult.from_dict(data)
    assert (back.verdict, back.repcs_verdict, back.axes) == (run.verdict, run.repcs_verdict, run.axes)
    assert run.verdict == "uncalibrated", "the tiny model has no axes calibration of its own: no borrowed verdict"


def test_a_file_without_a_headline_reads_back_with_repcs_verdict_and_a_computed_headline(run):
    data = run.result.to_dict()
    data["verdict"], data["verdict_reason"] = data["repcs_verdict"], data["repcs_verdict_reason"]
    for key in ("repcs_verdict", "repcs_verdict_reason", "axes"):
        del data[key]
    data["schema_version"] = 3
    back = DualPathResult.from_dict(data)
    assert back.repcs_verdict == run.repcs_verdict and back.axes is None
    assert back.verdict == run.verdict and back.headline == run.axes, "computed from the stored numbers"
    with pytest.raises(ValueError, match="headline"):
        DualPathResult.from_dict({**run.result.to_dict(), "verdict": "read" if run.verdict != "read" else "recalled"})


def test_the_engine_attaches_the_headline_to_every_result(lab):
    from core.engine import score_rows

    results = score_rows(lab.handle, [("Who wrote it?", "Ada wrote it."), ("Where?", "Here.")], SETTINGS)
    assert all(r is not None and r.axes is not None and r.verdict == r.axes["verdict"] for r in results)


def test_figures_are_the_pages_figures(run):
    from core.methods.internals import LENS_TOP_K, analyze
    from figures.attention import entropy_map_figure
    from figures.base import kl_entropy_figure_for
    from figures.trajectory import positions_figure

    assert run.figure("kl").to_json() == kl_entropy_figure_for(run.result).to_json()
    internals = analyze(run.lab.handle, run.result, top_k=LENS_TOP_K)
    got = run.figure("attention_entropy", path="parametric", where="mean", tau=1.0)
    assert got.to_json() == entropy_map_figure(internals, "parametric", "mean", 1.0).to_json()
    got = run.figure("trajectory_positions", quantity="l2")
    assert got.to_json() == positions_figure(internals, run.result.answer_tokens, "l2", None, "pc1").to_json()


@pytest.mark.parametrize(
    "name", ["kl", "attention_entropy_diff", "attention_context_mass", "attention_head", "trajectory_baselines",
             "logit_lens", "lookback_map"],
)  # fmt: skip
def test_each_cheap_figure_of_a_run_has_data(run, name):
    assert len(run.figure(name).data) >= 1


def test_bad_figure_names_and_options_are_refused_with_the_choices(run):
    with pytest.raises(ValueError, match="attention_entropy"):
        run.figure("no such chart")
    with pytest.raises(ValueError, match="path"):
        run.figure("attention_entropy", path="sideways")
    with pytest.raises(ValueError, match="where"):
        run.figure("attention_entropy", where=999)
    with pytest.raises(ValueError, match="CRM basis"):
        run.figure("lts")  # the tiny model has no stored CRM basis


def test_detectors_are_a_dataframe_grouped_in_the_pages_order(run):
    frame = run.detectors()
    assert list(frame.index.names) == ["group", "detector"]
    groups = list(dict.fromkeys(frame.index.get_level_values("group")))
    assert groups == [g for g in GROUPS if g in groups], "groups in the agreement view's order"
    repcs = frame.xs("repcs", level="detector").iloc[0]
    assert repcs["verdict"] == run.repcs_verdict, "the RePCS row is RePCS' verdict, not the headline"
    assert {"score", "direction", "threshold", "source", "says", "vs_headline"} <= set(frame.columns)


def test_html_escapes_user_and_model_text(run):
    evil = "<img src=x onerror=alert(1)></script>"
    result = replace(run.result, retrieval=replace(run.result.retrieval, answer=evil))
    page = rr.Run(run.lab, result)._repr_html_()
    assert evil not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    bundle = rr.Run(run.lab, result)._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"} and evil in bundle["text/plain"]
    tokens = replace(run.result.retrieval, tokens=[evil] * len(run.result.retrieval.tokens))
    page = rr.Run(run.lab, replace(run.result, retrieval=tokens))._repr_html_()
    assert page.count("</script>") == page.count("<script"), "a token cannot close the chart's script"


def _kl_share(inp):
    kl = np.asarray(inp.result.token_kl[: inp.result.score_window])
    return float((kl > 0.5).mean()) if kl.size else 0.0


def test_a_registered_detector_is_scored_by_the_run_and_by_evaluate(lab, run):
    rr.register_detector(
        name="api_kl_share",
        score=_kl_share,
        higher_means=GROUNDED_HIGH,
        thresholds=(lambda d, inp: DetectorThreshold(0.25, "a quarter"),),
        label="KL share",
        group=CONTEXT_RELIANCE,
    )
    try:
        fresh = lab.run("Who wrote it?", "Ada wrote it.")
        assert "api_kl_share" in fresh.detectors().index.get_level_values("detector")
        rows = pd.DataFrame(
            [
                {"query": "Who wrote it?", "context": "Ada wrote it.", "label": "memorized"},
                {"query": "Who made it?", "context": "Bo made it.", "label": "memorized"},
                {"query": "Where is it?", "context": "It is in Oslo.", "label": "grounded"},
                {"query": "When was it?", "context": "It was in May.", "label": "grounded"},
            ]
        )
        ev = lab.evaluate(rows, detectors=["repcs", "api_kl_share"], n_boot=10, noise_sigmas=())
        assert len(ev.rows) == 4 and ev.rows["score.api_kl_share"].between(0, 1).all()
        assert (ev.rows["verdict"] == "uncalibrated").all() and "repcs_verdict" in ev.rows
        assert "api_kl_share" in ev.report["detectors"] and len(ev.figure("roc").data) >= 2
        unlabeled = lab.evaluate(rows.drop(columns="label"), detectors=["api_kl_share"])
        assert len(unlabeled.rows) == 4 and "verdict" in unlabeled.rows and unlabeled.metrics.empty
        with pytest.raises(ValueError, match="ROC"):
            unlabeled.figure("roc")
    finally:
        rr.unregister_detector("api_kl_share")
    with pytest.raises(ValueError, match="query and context"):
        lab.evaluate(pd.DataFrame([{"question": "x"}]))


def test_calibration_status_and_the_hook(lab):
    cal = lab.calibration()
    assert isinstance(cal, rr.Calibration) and cal.calibrated is False and lab.model in cal.how
    status = cal.to_dict()
    assert "tau" in status and status["model"] == lab.model


def _lazy_imports() -> set[str]:
    """Every module the API imports, at the top or inside a function."""
    names: set[str] = set()
    for path in (REPO / "read_or_recall").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
    return {n for n in names if n.split(".")[0] in ("core", "figures", "components", "pages", "read_or_recall")}


def test_the_api_never_imports_streamlit_or_the_app_in_a_fresh_interpreter():
    modules = sorted(_lazy_imports())
    assert "figures.attention" in modules and "core.engine" in modules
    assert not [m for m in modules if m.split(".")[0] in ("components", "pages")], modules
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    code += "import read_or_recall\n"
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in ('streamlit', 'components', 'pages')))\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
