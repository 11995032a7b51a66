"""``pip install .`` (no dependencies) into a fresh virtual environment outside the checkout gives a working API on
the embedded model, its assets found in the installed package, collides with no other ``core`` / ``figures`` /
``components``, and holds no app code: no ``components`` or ``pages`` is installed, and importing the API and drawing
its figures loads no module of either.

The environment reuses this one's installed dependencies through a ``.pth`` line (offline, no download: the build
uses this environment's setuptools, ``--no-build-isolation``); the checkout itself is never on its path. A package
named ``core`` and one named ``components`` of somebody else's sit on its path too: they stay importable beside the
API (the one of those names it may load is theirs). Slow: one build, one model load, one run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import json, sys
import core, figures, components             # somebody else's packages of those names
import read_or_recall as rr
from read_or_recall.core.io import ASSETS
from read_or_recall.core.engine.calibration_record import record_for

lab = rr.Lab()
r = lab.run("What is the capital of France?", "Paris is the capital and largest city of France.")
fig = r.figure("kl")
attention = r.figure("attention_entropy")
app = sorted(
    m for m in sys.modules
    if m.split(".")[0] == "pages" or m.startswith(("components.", "read_or_recall.components", "read_or_recall.pages"))
)
print(json.dumps({
    "api": rr.__file__, "assets": str(ASSETS), "theirs": [core.WHO, figures.WHO, components.WHO],
    "charts": sys.modules["read_or_recall.figures.attention"].__file__, "app": app,
    "attention_traces": len(attention.data),
    "engine_core": sys.modules["read_or_recall.core"].__file__,
    "verdict": r.verdict, "repcs_verdict": r.repcs_verdict, "threshold_source": r.result.threshold_source,
    "calibrated": record_for(lab.handle, "auto").axes is not None, "traces": len(fig.data),
    "streamlit": "streamlit" in sys.modules, "html": "read-or-recall-run" in r._repr_html_(),
}))
"""


def test_pip_install_outside_the_checkout_gives_a_working_api(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    (site / "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # torch, transformers, …
    theirs = tmp_path / "theirs"
    for name in ("core", "figures", "components"):
        (theirs / name).mkdir(parents=True)
        (theirs / name / "__init__.py").write_text(f"WHO = 'somebody else\\'s {name}'\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "."],
        cwd=REPO, capture_output=True, text=True, env=clean, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    top = sorted(p.name for p in site.iterdir() if p.is_dir() and not p.name.endswith(".dist-info"))
    assert "read_or_recall" in top and not {"core", "figures", "components", "pages"} & set(top), top
    nested = sorted(p.name for p in (site / "read_or_recall").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert {"core", "figures", "assets"} <= set(nested) and not {"components", "pages"} & set(nested), nested
    installed = [p.relative_to(site).as_posix() for p in site.rglob("*.py")]
    assert not [p for p in installed if "/components/" in p or "/pages/" in p or p.startswith("app.py")], installed

    work = tmp_path / "elsewhere"
    work.mkdir()
    run = subprocess.run(
        [python, "-c", SCRIPT],
        cwd=work, capture_output=True, text=True, timeout=900,
        env={**clean, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(theirs)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["theirs"] == ["somebody else's core", "somebody else's figures", "somebody else's components"]
    assert got["app"] == [], got["app"]
    assert got["attention_traces"] >= 1, got
    for key in ("api", "assets", "engine_core", "charts"):
        assert Path(got[key]).resolve().is_relative_to(site.resolve()), (key, got[key])
        assert not Path(got[key]).resolve().is_relative_to(REPO), (key, got[key])
    assert got["calibrated"] and got["verdict"] in {"read", "recalled", "neither", "inconclusive"}, got
    assert got["threshold_source"].startswith("bundled"), got["threshold_source"]
    assert got["traces"] >= 1 and got["html"] and got["streamlit"] is False
