"""``calibrate-model`` end to end on the tiny random Llama: every artifact written, found by its lookup and used by
the app's and the CLI's paths; a killed run resumes; the budget and the row order.

The tiny model knows nothing and answers noise, so its rows get behavior labels from a stand-in labeler (the
real labels come from the answers' text and the swap test, tested in ``test_headline_fit.py``): what is tested
here is the plumbing — rows in, every per-model file out, every lookup finding it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from core.engine import DualPathSettings
from core.evaluation import headline_fit
from core.evaluation.calibrate import (
    DEFAULT_MINUTES,
    Budget,
    Work,
    calibrate_model,
    fits,
    order_units,
    read_rows,
    records,
    units_of,
)
from core.evaluation.constructions import AGREEING, CALIBRATION, CONFLICT, REPORT, ValidationRow
from core.model.handle import CancelToken, RunCancelled

SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6)
OBJECTS = ["Paris", "Rome", "Oslo", "Lima", "Bern", "Kyiv", "Riga", "Doha", "Baku", "Male", "Suva", "Apia"]


def _rows(n_facts: int = 12) -> list[ValidationRow]:
    """Short project-style rows (no knownness probe), both splits, conflict and agreeing, plus one ROME fact the
    tiny model cannot know (dropped by the knownness check)."""
    rows = []
    for i in range(n_facts):
        split = CALIBRATION if i % 2 == 0 else REPORT
        subject = f"Zorbia{i}"
        query = f"What is the capital of {subject}?"
        for relation, obj in ((CONFLICT, OBJECTS[(i + 1) % len(OBJECTS)]), (AGREEING, OBJECTS[i % len(OBJECTS)])):
            rows.append(
                ValidationRow(
                    "templated",
                    relation,
                    "project",
                    query,
                    f"The capital of {subject} is {obj}.",
                    [obj],
                    [OBJECTS[i % len(OBJECTS)]],
                    subject,
                    query,
                    split,
                )
            )
    rows.append(
        ValidationRow(
            "templated",
            CONFLICT,
            "rome",
            "Who owns Xamarin?",
            "Xamarin, from Rome.",
            ["Rome"],
            ["Microsoft"],
            "Xamarin",
            "13",
            CALIBRATION,
        )
    )
    return rows


def _write(rows: list[ValidationRow], path: Path) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(ValidationRow.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(r.to_dict() for r in rows)
    return path


def _label(s: headline_fit.Scored) -> str:
    """A stand-in behavior: by the fact's number, so both labels occur in both splits and relations."""
    number = int("".join(ch for ch in s.row.subject if ch.isdigit()) or 0)
    return "recalled" if (number // 2) % 2 else "read"


def _stand_in_axes(rows: list[headline_fit.Scored], model: str):
    """The axes of the tiny model: its noise has no answer span to fit them on (the fit itself is tested in
    ``test_headline_fit.py``), so the bundled axes are stood in, made for this model, fitted on nothing."""
    from dataclasses import replace

    from core.engine.axes_calibration import bundled_axes

    assert rows and all(s.row.split == CALIBRATION for s in rows)  # the fit is given calibration rows only
    return replace(bundled_axes(), model=model, fitted_on={"rows": len(rows)})


def _fewer_prompts(mp: pytest.MonkeyPatch) -> None:
    """The CRM basis and RADAR's features from a part of their bundled prompts (both stages are tested on the whole
    sets in their own modules): 12 + 12 CRM prompts, 8 + 8 RADAR training and 6 test prompts."""
    from core.engine.verdict import MEMORIZED
    from core.methods import radar
    from core.methods.crm import calibration as crm_calibration
    from core.methods.crm import store as crm_store
    from core.methods.crm.prompts import load_calibration_prompts
    from core.methods.radar import store as radar_store

    crm = load_calibration_prompts()
    crm = [p for p in crm if p.label == MEMORIZED][:12] + [p for p in crm if p.label != MEMORIZED][:12]
    mp.setattr(crm_calibration, "load_calibration_prompts", lambda *a, **k: list(crm))
    mp.setattr(crm_store, "load_calibration_prompts", lambda *a, **k: list(crm))
    mp.setattr(crm_store, "_DIGESTS", {})
    full = radar.load_prompt_sets()
    subset = [p for p in full if p.split == radar.TRAIN and p.id[-2:] <= "08"]
    subset += [p for p in full if p.split == radar.TEST][:6]
    mp.setattr(radar_store, "load_prompt_sets", lambda *a, **k: list(subset))


@pytest.fixture(scope="module")
def calibrated(tiny_handle, tmp_path_factory, one_thread):
    """One calibration of the tiny model into a fresh cache: ``(card, rows file, cache folder)``."""
    tmp = tmp_path_factory.mktemp("calibrate")
    mp = pytest.MonkeyPatch()
    mp.setenv("READ_OR_RECALL_CACHE", str(tmp / "cache"))
    _fewer_prompts(mp)
    mp.setattr(headline_fit, "behavior_of", _label)
    mp.setattr(records, "behavior_of", _label)
    mp.setattr(fits, "fit_calibration", _stand_in_axes)
    rows = _write(_rows(), tmp / "rows.csv")
    card = calibrate_model(tiny_handle, budget="40", rows_path=rows, settings=SETTINGS, out=tmp / "run")
    yield card, rows, tmp
    mp.undo()


def test_calibrate_model_writes_every_artifact_and_its_card(calibrated):
    card, _, tmp = calibrated
    statuses = {name: a["status"] for name, a in card["artifacts"].items()}
    for name in ("tau", "axes", "detector-thresholds", "lookback-lens", "redeep-choice", "combined-detector"):
        assert statuses[name] == "fitted", (name, card["artifacts"][name])
        assert Path(card["artifacts"][name]["path"]).is_file()
    assert statuses["crm-basis"] in ("computed", "kept") and statuses["radar"] in ("computed", "kept")
    # ReDeEP's every-layer PKS: not while the rows are scored, but after the headline's fits, one line per row
    assert statuses["redeep-pks"] == "computed" and "of 24 rows" in card["artifacts"]["redeep-pks"]["note"]
    pks = [json.loads(line) for line in (tmp / "run" / "work" / "pks.jsonl").read_text().splitlines()]
    assert len(pks) == 24 and all(len(e["pks"]) == 3 and e["error"] is None for e in pks)  # 3 layers each
    assert card["budget"]["knownness"] == {"unknown": 1}  # the ROME fact the tiny model cannot name
    assert card["rows"]["calibration"]["rows"] == 12 and card["rows"]["report"]["rows"] == 12
    for split in ("calibration", "report"):  # how each row was labeled: 6 conflict rows by text, 6 agreeing by swap
        c = card["rows"][split]
        assert (c["by_text"], c["by_swap"], c["named_neither"], c["swap_undecided"]) == (6, 6, 0, 0), c
    assert (
        "labeled 12 of 12 (100 %): 6 by what the answer names, 6 by a swap test"
        in (tmp / "run" / "card.txt").read_text()
    )
    assert card["held_out"]["rows"] == 12 and card["held_out"]["headline"]["headline"]["n"] == 12
    assert (tmp / "run" / "card.json").is_file() and "Held out" in (tmp / "run" / "card.txt").read_text()
    assert "quick calibration scored 24 rows" in card["worth"]  # fewer rows than the default: wider intervals
    # the card's time and memory are this run's, measured when it is written (a first run's card said 0.0 min, 0 GB)
    timing = card["timing"]
    assert timing["total_seconds"] > 0 and timing["cpu_seconds"] > 0 and timing["peak_rss_mb"] > 100, timing
    assert timing["total_seconds"] >= sum(timing["seconds"].values()) * 0.99


def test_the_calibrated_artifacts_are_found_by_every_lookup(calibrated, tiny_handle):
    from core.audit.calibration import resolve_calibration
    from core.detectors.combined import load_model_for
    from core.detectors.thresholds import bundled_thresholds
    from core.engine.calibration_record import record_for
    from core.engine.tau_resolution import ORIGIN_CALIBRATED, resolve_tau
    from core.methods.crm import load_basis
    from core.methods.lookback import model_for
    from core.methods.radar import feature_table_for
    from core.methods.redeep import is_fitted, load_choice_for

    name, template = tiny_handle.info.name, calibrated[0]["template"]
    record = record_for(tiny_handle, template)  # the one door: the model's identity + the resolved template
    assert record.axes is not None and record.axes.source.startswith("python -m core calibrate-model")
    tau = resolve_tau(name, calibration=record)
    assert tau.origin == ORIGIN_CALIBRATED and tau.threshold is not None and "calibrate-model" in tau.source
    assert bundled_thresholds(tiny_handle, template)["origin"] == "calibrate-model"
    assert load_basis(tiny_handle, template) is not None
    assert model_for(tiny_handle, template) is not None
    assert is_fitted(load_choice_for(tiny_handle, template))
    assert load_model_for(tiny_handle, template) is not None
    assert feature_table_for(tiny_handle, compute=False) is not None
    audit, note = resolve_calibration(tiny_handle, template)
    assert audit is not None and "none" not in note


def test_a_run_after_calibration_is_judged_with_the_models_own_files(calibrated, tiny_handle):
    from core.detectors.agreement import assess
    from core.engine import run_dual_path
    from core.engine.axes import headline
    from core.engine.verdict import UNCALIBRATED

    result = run_dual_path(tiny_handle, "What is the capital of Zorbia3?", "The capital of Zorbia3 is Oslo.", SETTINGS)
    assert headline(result).verdict != UNCALIBRATED
    assert result.threshold is not None and "calibrate-model" in result.threshold_source
    rows = {v.name: v for v in assess(tiny_handle, result).verdicts}
    for name in ("lookback", "combined", "redeep", "crm_lts", "repcs_mean", "ppl"):
        assert rows[name].score is not None, (name, rows[name])
        assert rows[name].threshold is not None, (name, rows[name].source)


def test_run_json_shows_the_calibration_card_next_to_the_verdict(calibrated, tiny_handle, monkeypatch, capsys):
    import core.cli.common as common
    from core.cli import main

    monkeypatch.setattr(common, "load_model", lambda *a, **k: tiny_handle)
    code = main(
        [
            "run",
            "--query",
            "What is the capital of Zorbia3?",
            "--context",
            "The capital of Zorbia3 is Oslo.",
            "--json",
            "--max-new-tokens",
            "6",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["calibration"]["origin"] == "calibrate-model" and out["calibration"]["card"]["held_out_rows"] == 12
    assert out["verdict"] != "uncalibrated"


def test_a_cancelled_run_continues_where_it_stopped(calibrated, tiny_handle, tmp_path):
    _, rows, _ = calibrated
    token = CancelToken()

    def progress(done: int, total: int, text: str = "") -> None:
        if text.startswith("rows") and done >= 8:
            token.cancel("test")

    with pytest.raises(RunCancelled) as info:
        calibrate_model(
            tiny_handle, budget="40", rows_path=rows, settings=SETTINGS, out=tmp_path, cancel=token, progress=progress
        )
    kept = (tmp_path / "work" / "scored.jsonl").read_text().splitlines()
    assert 8 <= len(kept) < 24
    (note,) = info.value.__notes__  # what the cancel kept, for the page and the command line
    assert f"kept {len(kept)} rows scored, 0 swap tests and radar (in {tmp_path / 'work'})" in note, note
    card = calibrate_model(tiny_handle, budget="40", rows_path=rows, settings=SETTINGS, out=tmp_path)
    lines = (tmp_path / "work" / "scored.jsonl").read_text().splitlines()
    keys = [json.loads(line)["key"] for line in lines]
    assert lines[: len(kept)] == kept and len(keys) == len(set(keys)) == 24  # nothing scored twice
    assert card["budget"]["scored_rows"] == 24


def test_a_larger_budget_continues_from_the_rows_already_scored(calibrated, tiny_handle, tmp_path):
    _, rows, _ = calibrated
    calibrate_model(tiny_handle, budget="8", rows_path=rows, settings=SETTINGS, out=tmp_path)
    first = (tmp_path / "work" / "scored.jsonl").read_text().splitlines()
    assert 8 <= len(first) < 24
    card = calibrate_model(tiny_handle, budget="40", rows_path=rows, settings=SETTINGS, out=tmp_path)
    lines = (tmp_path / "work" / "scored.jsonl").read_text().splitlines()
    assert lines[: len(first)] == first and len(lines) == 24  # the first rows kept, the rest scored once
    assert card["budget"]["scored_rows"] == 24 and card["budget"]["rows"] == 40


def test_budget_parses_rows_and_minutes():
    assert Budget.parse(None).row_cap == Budget().row_cap and Budget.parse(None).is_default
    assert Budget.parse("120").rows == 120 and Budget.parse("120rows").rows == 120
    assert Budget.parse("30m").minutes == 30 and Budget.parse("2.5min").minutes == 2.5
    # the default stops in time (its rows or its time cap, whichever first); a budget in rows has no time cap
    assert Budget().time_cap == DEFAULT_MINUTES and Budget.parse("240").time_cap is None
    assert Budget.parse("30m").time_cap == 30 and "within" in Budget().describe()
    for bad in ("lots", "3", "0.5m", "12.5"):
        with pytest.raises(ValueError):
            Budget.parse(bad)


def test_any_prefix_of_the_order_is_balanced_between_the_splits():
    rows = read_rows()
    order = order_units(units_of(rows))
    share = sum(u.split == CALIBRATION for u in order) / len(order)
    for n in (10, 50, 200):
        splits = [u.split for u in order[:n]]
        assert abs(splits.count(CALIBRATION) - share * n) <= 1  # each split at its share, within one unit
    assert order == order_units(units_of(rows))  # seeded
    rome = next(u for u in order if u.rows[0].source == "rome")
    assert rome.probe is not None and all(r.subject == rome.rows[0].subject for r in rome.rows)


def test_a_work_folder_of_another_model_is_refused(tiny_handle, tmp_path):
    work = Work(tmp_path, tiny_handle, "chat")
    work.state["identity"]["model"] = "another"
    work.save()
    with pytest.raises(ValueError, match="another calibration"):
        Work(tmp_path, tiny_handle, "chat")


def test_the_estimate_before_a_start_never_fails(tiny_handle, tmp_path, monkeypatch):
    """The page asks for it on every rerun: from the budget (minutes), the unit costs (or nothing measured yet), or
    the paces a stopped run left in the model's work folder."""
    from core.engine.estimate import Estimate
    from core.evaluation.calibrate import estimate_calibration
    from core.evaluation.calibrate.checkpoints import SCORED, STATE
    from core.model import calibration_store

    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    assert estimate_calibration(tiny_handle, Budget.parse("30m")) == 1800.0
    found = estimate_calibration(tiny_handle, Budget.parse("80"))
    assert found is None or isinstance(found, Estimate)
    work = Work(calibration_store.work_folder(tiny_handle, "chat"), tiny_handle, "chat")
    work.state["pace"] = {"rows": 2.0, "swap": 1.0}
    work.save()
    (work.folder / SCORED).write_text('{"key": "a"}\n' * 30)
    assert (work.folder / STATE).is_file()
    seconds = estimate_calibration(tiny_handle, Budget.parse("80"))
    assert seconds == pytest.approx(50 * 2.0 + 80 * 0.35 * 1.0 + 60.0)


def test_the_batch_keeps_a_large_vocabulary_s_logits_in_bounds(tiny_handle):
    from dataclasses import replace

    from core.evaluation.calibrate import MAX_BATCH_ROWS, batch_size_for

    assert batch_size_for(tiny_handle, DualPathSettings()) == MAX_BATCH_ROWS
    gemma = type("H", (), {"info": replace(tiny_handle.info, vocab_size=262_144)})()
    assert batch_size_for(gemma, DualPathSettings()) == 4
    assert batch_size_for(gemma, DualPathSettings(max_new_tokens=1024)) == 1


def test_the_headline_s_artifacts_come_first_and_the_card_marks_the_rest_pending(calibrated, tiny_handle, tmp_path):
    """Cancelled as the detectors' fits begin: τ and the axes are written and on a card, the CRM basis and the
    detectors' artifacts on it pending; run again, the card has them all."""
    _, rows, _ = calibrated
    token = CancelToken()
    texts: list[str] = []

    def progress(done: int, total: int, text: str = "") -> None:
        texts.append(text)
        if text.startswith("detectors"):
            token.cancel("test")

    with pytest.raises(RunCancelled) as info:
        calibrate_model(
            tiny_handle, budget="8", rows_path=rows, settings=SETTINGS, out=tmp_path, cancel=token, progress=progress
        )
    card = json.loads((tmp_path / "card.json").read_text())
    status = {name: a["status"] for name, a in card["artifacts"].items()}
    assert status["tau"] == "fitted" and status["axes"] == "fitted", status
    later = ("crm-basis", "redeep-pks", "detector-thresholds", "lookback-lens", "redeep-choice", "combined-detector")
    for name in later:
        assert status[name] == "pending", status  # the CRM basis, PKS and the detectors' fits come after the headline
    assert "pending" in (tmp_path / "card.txt").read_text()
    assert "tau, axes" in info.value.__notes__[0]
    assert any(t.startswith("rows ") and "(stage 2 of 8)" in t and "left in all" in t for t in texts), texts
    card = calibrate_model(tiny_handle, budget="8", rows_path=rows, settings=SETTINGS, out=tmp_path)
    assert "pending" not in {a["status"] for a in card["artifacts"].values()}


def test_a_state_of_every_stage_done_over_empty_checkpoints_scores_the_rows_again(calibrated, tiny_handle, tmp_path):
    _, rows, tmp = calibrated
    work = tmp_path / "work"
    work.mkdir()
    (work / "state.json").write_text((tmp / "run" / "work" / "state.json").read_text())
    (work / "scored.jsonl").write_text("")
    (work / "swap.jsonl").write_text("")
    card = calibrate_model(tiny_handle, budget="40", rows_path=rows, settings=SETTINGS, out=tmp_path)
    assert card["budget"]["scored_rows"] == 24 and card["held_out"]["rows"] == 12  # never a card of 0 rows


def test_rows_scored_before_the_crm_basis_get_their_crm_scores_from_it(calibrated, tiny_handle):
    """The module's calibration started in a fresh cache: its rows were scored before the CRM basis existed, kept
    their displacement, and got every CRM score once the basis was computed after the headline's fits."""
    from core.evaluation.calibrate.checkpoints import CRM_SCORES

    card, _, tmp = calibrated
    work = Work(tmp / "run" / "work", tiny_handle, card["template"])
    assert work.state["done"].index("headline") < work.state["done"].index("crm-basis")
    records = work.records().values()
    assert len(work.crm_scores()) == len(records) == 24 and (tmp / "run" / "work" / CRM_SCORES).is_file()
    for r in records:
        assert r.crm_displacement is not None
        assert all(isinstance(r.scores[name], float) for name in ("crm_lts", "crm_lr", "crm_l2")), r.scores
        assert isinstance(r.combined["crm_lts"], float) and not any("crm" in e for e in r.errors), r.errors


def test_damaged_checkpoint_lines_are_skipped_and_the_run_ends_with_every_row(calibrated, tiny_handle, tmp_path):
    import shutil

    _, rows, tmp = calibrated
    work = tmp_path / "work"
    shutil.copytree(tmp / "run" / "work", work)
    (work / ".lock").unlink()
    with (work / "scored.jsonl").open("a") as fh:
        fh.write('1\n{"key": "zzz"}\n')
    with (work / "swap.jsonl").open("a") as fh:
        fh.write('{"key": "a", "swap": 1}\n')
    said: list[str] = []

    def progress(done: int, total: int, text: str = "") -> None:
        said.append(text)

    card = calibrate_model(tiny_handle, budget="40", rows_path=rows, settings=SETTINGS, out=tmp_path, progress=progress)
    assert card["budget"]["scored_rows"] == 24 and card["held_out"]["rows"] == 12
    assert any(f"{work / 'scored.jsonl'}: skipped 2 damaged lines" in s for s in said), said
    assert any(f"{work / 'swap.jsonl'}: skipped 1 damaged line " in s for s in said), said
    assert len((work / "scored.jsonl").read_text().splitlines()) == 24  # nothing scored twice
