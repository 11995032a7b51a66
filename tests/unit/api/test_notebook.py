"""docs/notebook.ipynb in a real Jupyter kernel (nbclient + ipykernel, nothing from the network): its outputs checked.

The notebook runs the public API on the embedded model. Its cells tagged ``check`` print one JSON line each; this
test reads them: the headline equals ``python -m core run --json``'s for the same inputs, every figure of a run and of
every other result (an ablation, a sweep, Self-Critique, SMA, an evaluation) renders, the detector the notebook
registers is scored by ``evaluate`` and by the run made before it, no warning is printed, and nothing imported
Streamlit. Slow: one kernel, one model, every analysis once (see docs/notebook.md for the time it takes).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # one kernel runs every analysis once: 6–12 min on 2 cores

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "docs" / "notebook.ipynb"


def _checks(nb: Any) -> dict[str, dict[str, Any]]:
    """The JSON line each ``check`` cell printed, by the cell's other tag."""
    out = {}
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "check" not in tags:
            continue
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        lines = [line for line in text.splitlines() if line.startswith("{")]
        assert lines, f"cell {tags} printed no JSON: {text[:500]}"
        out[next(t for t in tags if t != "check")] = json.loads(lines[-1])
    return out


def _close(a: Any, b: Any, path: str = "") -> None:
    """``a == b`` with floats compared at 1e-4 relative (the kernel and the CLI are two processes: float32 kernels
    may sum in another order; docs/architecture.md, "Pinned numbers on any CPU")."""
    if isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None and math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5), (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, sorted(a), sorted(b))
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The notebook executed in a fresh kernel, from a folder outside the checkout."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    workdir = tmp_path_factory.mktemp("notebook")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    client = nbclient.NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    client.execute(env=env)  # the kernel starts in workdir, with this environment, and is shut down after
    return nb


def test_the_notebook_headline_is_the_command_lines(executed: Any) -> None:
    got = _checks(executed)["headline"]
    cli = subprocess.run(
        [sys.executable, "-m", "core", "run", "--json", "--query", got["query"], "--context", got["context"]],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=600,
        check=True,
    )
    want = json.loads(cli.stdout)
    assert got["verdict"] == want["verdict"] == want["axes"]["verdict"]
    assert got["repcs_verdict"] == want["repcs_verdict"]
    assert got["axes"]["title"] == want["axes"]["title"] and got["axes"]["reason"] == want["axes"]["reason"]
    _close(got["axes"], want["axes"], "axes")
    _close(got["repcs_score"], want["repcs_score"], "repcs_score")
    assert got["streamlit"] is False


def test_every_figure_of_the_notebook_renders(executed: Any) -> None:
    import read_or_recall as rr

    checks = _checks(executed)
    figures = checks["figures"]["figures"]
    assert list(figures) == rr.figure_names("Run"), "every figure of a run, in the catalog's order"
    empty = {name: f for name, f in figures.items() if f["traces"] < 1 or f["html"] < 500}
    assert not empty, f"figures without data: {empty}"
    results = checks["results"]["result_figures"]
    want = {f"{spec.of}.{spec.name}" for spec in rr.FIGURES.values() if spec.of not in ("Run", "Evaluation")}
    assert set(results) == want, (sorted(results), sorted(want))
    assert all(n >= 1 for n in results.values()), results
    held = set(checks["results"]["held"])
    assert {"internals", "swap_test", "self_critique", "sma", "context_ablation", "ablate", "dose_response",
            "layer_sweep"} <= held, held  # fmt: skip
    assert checks["figures"]["streamlit"] is False


def test_the_notebook_prints_no_warning_on_import(executed: Any) -> None:
    """Issue 45: the import printed a TqdmWarning ("IProgress not found") in a kernel without ipywidgets."""
    errors = [o.get("text", "") for c in executed.cells for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert not [e for e in errors if "IProgress" in e or "TqdmWarning" in e], errors


def test_a_detector_registered_in_the_notebook_is_scored_by_evaluate(executed: Any) -> None:
    plugin = _checks(executed)["plugin"]["evaluate"]
    assert "score.kl_share" in plugin["columns"] and "verdict" in plugin["columns"]
    scores = plugin["kl_share"]
    assert len(scores) == 4 and all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
    assert plugin["auc"] is not None and 0.0 <= plugin["auc"] <= 1.0
    assert set(plugin["verdicts"]) <= {"read", "recalled", "neither", "inconclusive"}
    assert plugin["roc_traces"] >= 2
    assert "kl_share" in _checks(executed)["plugin"]["run_rows"], "a detector registered after a run is one of its rows"


def test_the_notebook_shows_a_run_as_escaped_html(executed: Any) -> None:
    first = next(c for c in executed.cells if c.cell_type == "code")
    (shown,) = [o for o in first.outputs if o.get("output_type") == "execute_result"]
    page = shown["data"]["text/html"]
    assert "read-or-recall-run" in page and "Plotly.newPlot" in page, "the headline view with the KL chart"
    assert "Eiffel" in page and "Paris" in page  # the model answers Paris despite the context: recalled
