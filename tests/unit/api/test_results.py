"""The notebook API's public face (issue 44): one rule for verbs, a named result with ``figure`` for every verb, no
call that changes an earlier result, a visible cache, one name per thing — on the tiny random model."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest

import read_or_recall as rr
from core.detectors import CONTEXT_RELIANCE, GROUNDED_HIGH
from core.engine import DualPathSettings
from read_or_recall import registry
from read_or_recall.results import Result

SETTINGS = DualPathSettings(max_new_tokens=4, score_window=4, top_k=5)
SMALL_SMA = {"n_samples": 2, "max_new_tokens": 2, "batch_size": 4, "granularity": "word"}


@pytest.fixture(scope="module")
def lab(tiny_handle):
    return rr.Lab(handle=tiny_handle, settings=SETTINGS)


def _public_callables() -> list[tuple[str, Any]]:
    """Every public function of ``read_or_recall`` and every public method and property of its public classes."""
    out = []
    for name in rr.__all__:
        obj = getattr(rr, name)
        if inspect.isfunction(obj):
            out.append((name, obj))
        elif inspect.isclass(obj):
            for attr, member in inspect.getmembers(obj):
                if attr.startswith("_") and attr != "__init__":
                    continue
                if isinstance(inspect.getattr_static(obj, attr), property):
                    out.append((f"{name}.{attr}", member.fget))
                elif inspect.isfunction(member) and attr != "__init__":
                    out.append((f"{name}.{attr}", member))
    return out


def test_every_public_function_and_method_has_a_named_return_type():
    untyped = []
    for name, fn in _public_callables():
        annotation = inspect.signature(fn).return_annotation
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        if annotation is inspect.Signature.empty or text in ("Any", "typing.Any"):
            untyped.append(name)
    assert not untyped, f"return annotation missing or Any: {untyped}"
    assert len(_public_callables()) > 40, "the walk found the API"


def test_every_result_type_with_charts_draws_them_through_the_one_registry():
    owners = {spec.of for spec in registry.FIGURES.values()}
    exported = {n: getattr(rr, n) for n in rr.__all__ if inspect.isclass(getattr(rr, n))}
    assert owners <= set(exported), f"charts of a type the API does not export: {owners - set(exported)}"
    for name, cls in exported.items():
        charts = registry.figure_names(name)
        if charts:
            assert callable(getattr(cls, "figure", None)), f"{name} has charts but no figure()"
            if issubclass(cls, Result):
                assert tuple(charts) == cls.FIGURES, (name, charts, cls.FIGURES)
        if issubclass(cls, Result) and cls is not Result:
            assert callable(getattr(cls, "to_dict", None)), f"{name} has no to_dict()"
    assert owners == {"Run", "Ablation", "NoiseSweep", "Evaluation", "SelfCritique", "SourceAttribution",
                      "ContextAblation"}  # fmt: skip
    assert not hasattr(rr, "noise_grid_figure"), "one figure mechanism: a sweep draws itself"


def test_the_rule_for_verbs_no_lab_method_takes_a_run():
    """A verb belongs to what it studies: the lab's verbs are about many inputs or the model, never one run."""
    for attr, member in inspect.getmembers(rr.Lab, inspect.isfunction):
        if attr.startswith("_"):
            continue
        params = inspect.signature(member).parameters.values()
        assert not any("Run" in str(p.annotation) for p in params), f"Lab.{attr} takes a run: make it a Run method"
    for verb in ("ablate", "dose_response", "layer_sweep", "swap_test", "sma", "self_critique", "context_ablation"):
        assert callable(getattr(rr.Run, verb)) and not hasattr(rr.Lab, verb), verb


def test_one_name_per_thing():
    assert not hasattr(rr, "status") and not hasattr(rr, "calibrate"), "lab.calibration() and lab.calibrate()"
    assert callable(rr.Lab.calibration) and callable(rr.Lab.calibrate)


def _snapshot(results: dict[str, Any]) -> dict[str, str]:
    def plain(value: Any) -> str:
        data = value.to_dict() if hasattr(value, "to_dict") else value
        if isinstance(data, pd.DataFrame):
            data = data.to_dict("records")
        return json.dumps(data, default=lambda o: o.tolist() if isinstance(o, np.ndarray) else str(o), sort_keys=True)

    return {k: plain(v) for k, v in results.items()}


def test_no_call_changes_an_earlier_result_and_the_run_says_what_it_holds(lab):
    r = lab.run("Who wrote it?", "Ada wrote it. It was long.")
    made: dict[str, Any] = {"run": r, "axes": dict(r.axes), "detectors": r.detectors().reset_index()}
    agreement = r.agreement()
    made["agreement"] = [v.name for v in agreement.verdicts]
    assert r.estimate("swap_test").held is False and r.swap_tests == ()
    calls = {
        "swap": lambda: r.swap_test(),
        "critique": lambda: r.self_critique(max_new_tokens=3),
        "sma": lambda: r.sma(**SMALL_SMA),
        "context_ablation": lambda: r.context_ablation(max_new_tokens=2, batch_size=4),
        "ablation": lambda: r.ablate("0-1", eps=1.0, seed=0),
        "dose": lambda: r.dose_response("0", eps_grid=(0.0, 0.5), seeds=(0,)),
        "sweep": lambda: r.layer_sweep(eps=1.0, seeds=(0,), layers="0,1"),
        "internals_chart": lambda: r.figure("attention_entropy_diff"),
        "second_run": lambda: lab.run("Where is it?", "It is in Oslo."),
    }
    for name, call in calls.items():
        before = _snapshot(made)
        made[name] = call()
        after = _snapshot({k: made[k] for k in before})
        changed = [k for k in before if before[k] != after[k]]
        assert not changed, f"{name} changed the earlier {changed}"
    assert [v.name for v in agreement.verdicts] == made["agreement"], "an earlier Agreement was not extended"
    swap = made["swap"]
    assert isinstance(swap, rr.SwapTest) and r.swap_tests == (swap,) and r.swap_test() is swap
    assert "swap_test" not in r.axes and swap.axes["swap_test"] == swap.test.to_dict()
    assert r.estimate("swap_test").held is True and "nothing to compute" in r.estimate("swap_test").text
    held = r.computed()
    assert {"swap_test", "self_critique", "sma", "ablate", "dose_response", "layer_sweep", "internals"} <= set(
        held["analysis"]
    ), held
    assert (held["seconds"] >= 0).all() and list(held.columns) == ["analysis", "settings", "seconds"]
    for name, kind in (("critique", rr.SelfCritique), ("sma", rr.SourceAttribution), ("ablation", rr.Ablation)):
        assert isinstance(made[name], kind)
        for chart in kind.FIGURES:
            assert len(made[name].figure(chart).data) >= 1, (name, chart)
    assert len(made["context_ablation"].figure().data) >= 1
    assert made["dose"].figure().data and made["sweep"].figure().data and made["sweep"].kind == "layer_sweep"
    assert len(made["dose"].to_frame()) == 2 and len(made["sma"].to_frame()) >= 1
    with pytest.raises(ValueError, match="layer_sweep"):
        made["sweep"].figure("dose_response")
    with pytest.raises(ValueError, match="no charts"):
        swap.figure()


def test_an_estimate_names_the_work_before_the_call(lab):
    r = lab.run("Who wrote it?", "Ada wrote it.")
    plan = r.estimate("self_critique", max_new_tokens=3)
    assert (
        plan.held is False and "2 generations of up to" in plan.computes and plan.to_dict()["verb"] == "self_critique"
    )
    r.self_critique(max_new_tokens=3)
    assert r.estimate("self_critique", max_new_tokens=3).held is True
    assert r.estimate("self_critique", max_new_tokens=2).held is False, "other settings: not held"
    with pytest.raises(ValueError, match="swap_test"):
        r.estimate("no such verb")


def _share(inp):
    kl = np.asarray(inp.result.token_kl[: inp.result.score_window])
    return float((kl > 0.5).mean()) if kl.size else 0.0


def test_a_detector_registered_after_a_run_is_one_of_its_rows(lab):
    """Issue 45: the docs say a registered detector appears everywhere at once; it was missing from earlier runs."""
    r = lab.run("Who wrote it?", "Ada wrote it.")
    before = r.detectors()
    rr.register_detector(name="zz_late", score=_share, higher_means=GROUNDED_HIGH, label="late", group=CONTEXT_RELIANCE)
    try:
        after = r.detectors()
        assert "zz_late" in after.index.get_level_values("detector")
        assert "zz_late" not in before.index.get_level_values("detector"), "the earlier frame is unchanged"
    finally:
        rr.unregister_detector("zz_late")
    assert "zz_late" not in r.detectors().index.get_level_values("detector"), "unregistered: no longer a row"


def test_a_builtin_name_is_refused_unless_overwrite_and_the_row_is_marked(lab):
    """Issue 43 G: ``register_detector(name="repcs", …)`` silently replaced the built-in."""
    from core.detectors import get

    builtin = get("repcs")
    fields = {"score": _share, "higher_means": GROUNDED_HIGH, "label": "my repcs", "group": CONTEXT_RELIANCE}
    with pytest.raises(ValueError, match="built-in"):
        rr.register_detector(name="repcs", **fields)
    with pytest.raises(ValueError, match="built-in"):
        rr.register_detector(name="min_k_10", **fields)  # a family member is a built-in too
    assert get("repcs") is builtin
    r = lab.run("Who wrote it?", "Ada wrote it.")
    rr.register_detector(name="repcs", overwrite=True, **fields)
    try:
        row = r.detectors().xs("repcs", level="detector").iloc[0]
        assert row["label"] == "my repcs" and row["replaces"] == builtin.label
        described = {d["name"]: d for d in rr.detectors()}
        assert described["repcs"]["replaces"] == builtin.label and described["ppl"]["replaces"] is None
    finally:
        rr.unregister_detector("repcs")
    assert get("repcs") is builtin, "unregistering the replacement brings the built-in back"
    assert r.detectors().xs("repcs", level="detector").iloc[0]["replaces"] is None


def test_a_declaration_without_a_required_field_names_it():
    """Issue 45: no label raised a bare TypeError ("missing 1 required positional argument")."""
    with pytest.raises(ValueError, match="label"):
        rr.register_detector(name="zz_x", score=_share, higher_means=GROUNDED_HIGH)
    with pytest.raises(ValueError, match="colour"):
        rr.register_detector(name="zz_x", score=_share, higher_means=GROUNDED_HIGH, label="x", colour="red")


def test_evaluate_scores_unlabeled_rows_through_the_evaluation_job_without_a_csv(lab, monkeypatch):
    import core.evaluation
    from core.evaluation import scheduler

    batches = []
    real = scheduler.EvaluationJob._score_batch

    def counted(self, *args, **kwargs):
        batches.append(len(self.batches[args[1]]))
        return real(self, *args, **kwargs)

    def no_csv(*args, **kwargs):
        raise AssertionError("a DataFrame is not turned into CSV bytes")

    monkeypatch.setattr(scheduler.EvaluationJob, "_score_batch", counted)
    monkeypatch.setattr(core.evaluation, "parse_labeled_bytes", no_csv)
    frame = pd.DataFrame([{"query": "Who wrote it?", "context": "Ada wrote it.", "source": "a"},
                          {"query": "Where is it?", "context": "It is in Oslo.", "source": "b"}])  # fmt: skip
    seen = []
    ev = lab.evaluate(frame, progress=lambda done, total: seen.append((done, total)))
    assert sum(batches) == 2 and seen[-1] == (2, 2), (batches, seen)
    assert list(ev.rows["query"]) == list(frame["query"]) and "label" not in ev.rows and ev.metrics.empty
    assert ev.to_frame().equals(ev.rows) and "verdict" in ev.rows
    with pytest.raises(ValueError, match="Row 2, column 'context'"):
        lab.evaluate(pd.DataFrame([{"query": "a", "context": "b"}, {"query": "c", "context": " "}]))
    with pytest.raises(ValueError, match="label"):
        lab.evaluate(pd.DataFrame([{"query": "a", "context": "b", "label": "maybe"}]))


def test_the_import_silences_tqdms_ipywidgets_warning():
    """Issue 45: ``import read_or_recall`` in a kernel without ipywidgets printed a TqdmWarning."""
    code = (
        "import warnings, read_or_recall\n"
        "from tqdm import TqdmWarning\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.warn('IProgress not found. Please update jupyter and ipywidgets.', TqdmWarning)\n"
        "    warnings.warn('another warning', UserWarning)\n"
        "print([str(w.message) for w in seen])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['another warning']", out.stdout + out.stderr
