"""``calibrate-model``'s input and work folder (issue 43 B, E, F): an empty ``--out`` or budget and an absurd
budget are refused before the model loads; a second run of one work folder is refused while the first holds its
lock (released when that process dies); every damaged checkpoint names its file and what is wrong — skipped (and
scored again) where it can be, ``--restart`` where it cannot — and nothing blocks on a named pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.evaluation.calibrate import Budget, DamagedCheckpoint, FolderInUse, Work, calibrate_model
from core.evaluation.calibrate.checkpoints import LOCK, SCORED, STATE, SWAPS, hold_lock
from core.evaluation.calibrate.score import score_rows
from tests.unit.evaluation.test_model_calibration import SETTINGS, _rows, _write

TEMPLATE = "chat"


@pytest.fixture(scope="module")
def one_record(tiny_handle, one_thread) -> dict:
    """One real scored row as ``scored.jsonl`` holds it (the tiny model, six tokens)."""
    (record,) = score_rows(tiny_handle, [_rows(1)[0]], SETTINGS, None)
    return record.to_dict()


def _work(folder: Path, handle, state: dict | None = None, **lines: list[str]) -> Path:
    """A work folder of ``handle`` with ``state`` (default: valid, the rows stage done) and checkpoint lines."""
    folder.mkdir(parents=True, exist_ok=True)
    ident = {"model": handle.info.name, "slug": handle.slug, "template": TEMPLATE}
    state = {"identity": ident, "done": ["rows"], "pace": {}, "elapsed": 0.0} if state is None else state
    (folder / STATE).write_text(json.dumps(state), encoding="utf-8")
    for name, content in lines.items():
        (folder / {"scored": SCORED, "swaps": SWAPS}[name]).write_text("".join(content), encoding="utf-8")
    return folder


# -- issue 43 B: refused before the model loads ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--out", ""], "--out is empty"),
        (["--out", "   "], "--out is empty"),
        (["--budget", ""], "--budget is empty"),
        (["--budget", " "], "--budget is empty"),
        (["--budget", "99999999999999999999999"], "from 8 to 100000"),
        (["--budget", "99999999999m"], "from 1 to 10080"),
    ],
)
def test_an_empty_out_or_budget_and_an_absurd_budget_are_refused_before_the_model_loads(
    argv, words, monkeypatch, capsys, tmp_path
):
    import core.cli.commands.calibrate_model as command
    from core.cli import main

    def never(*_a, **_k):
        raise AssertionError("the model was loaded")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(command, "load_handle", never)
    assert main(["calibrate-model", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "unexpected" not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written into the current folder


def test_the_library_refuses_them_too(tiny_handle, tmp_path):
    for bad in ("", "  "):
        with pytest.raises(ValueError, match="empty"):
            Budget.parse(bad)
        with pytest.raises(ValueError, match="--out is empty"):
            calibrate_model(tiny_handle, out=bad)
    with pytest.raises(ValueError, match="from 8 to 100000"):
        Budget.parse(10**23)


# -- issue 43 E: one run per work folder ----------------------------------------------------------------------------


def test_a_second_calibration_of_one_work_folder_is_refused_naming_it(tiny_handle, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    rows = _write(_rows(), tmp_path / "rows.csv")
    work = tmp_path / "run" / "work"
    refused = re.escape(f"{work} is in use by another calibration (process {os.getpid()})")
    with hold_lock(work), pytest.raises(FolderInUse, match=refused):
        calibrate_model(tiny_handle, budget="8", rows_path=rows, settings=SETTINGS, out=tmp_path / "run")
    with hold_lock(work):  # released at the end of the block
        pass


def test_the_lock_of_a_process_that_died_is_released(tmp_path):
    code = (
        "import sys, time\nfrom pathlib import Path\n"
        "from core.evaluation.calibrate.checkpoints import hold_lock\n"
        "with hold_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse, match=f"process {child.pid}"), hold_lock(tmp_path):
            pass
    finally:
        child.kill()  # like a crash: no cleanup runs in the child
        child.wait()
    with hold_lock(tmp_path):
        assert (tmp_path / LOCK).read_text() == str(os.getpid())


# -- issue 43 F: damaged checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [("", "it is empty"), ("   \n", "it is empty"), ("{nope", "not JSON"), ("[1, 2]", "holds a JSON list")],
)
def test_a_damaged_state_names_its_file_and_suggests_restart(tiny_handle, tmp_path, text, words):
    (tmp_path / STATE).write_text(text, encoding="utf-8")
    with pytest.raises(DamagedCheckpoint) as info:
        Work(tmp_path, tiny_handle, TEMPLATE)
    message = str(info.value)
    assert str(tmp_path / STATE) in message and words in message and "--restart" in message, message


def test_a_state_with_fields_of_the_wrong_kind_is_damaged(tiny_handle, tmp_path):
    ident = {"model": tiny_handle.info.name, "slug": tiny_handle.slug, "template": TEMPLATE}
    for bad in ({"done": "rows"}, {"done": [1]}, {"pace": [1]}, {"elapsed": "x"}):
        (tmp_path / STATE).write_text(json.dumps({"identity": ident, **bad}), encoding="utf-8")
        with pytest.raises(DamagedCheckpoint, match=f"damaged '{next(iter(bad))}'.*--restart"):
            Work(tmp_path, tiny_handle, TEMPLATE)


def test_damaged_lines_of_scored_rows_are_skipped_counted_and_scored_again(tiny_handle, tmp_path, one_record):
    good = json.dumps(one_record) + "\n"
    torn = json.dumps(one_record)[:50]
    folder = _work(tmp_path, tiny_handle, scored=[good, "1\n", '{"key": "zzz"}\n', "\n", '"x"\n', torn])
    work = Work(folder, tiny_handle, TEMPLATE)
    (notice,) = work.notices
    assert str(folder / SCORED) in notice and "skipped 4 damaged lines" in notice, notice
    assert "line 2: TypeError" in notice and "KeyError" in notice and "their rows are scored again" in notice
    assert work.reopen_from == "rows"  # the skipped rows are scored again
    assert list(work.records()) == [one_record["key"]]
    assert (folder / SCORED).read_text() == good  # rewritten without them: the next append starts a fresh line
    assert Work(folder, tiny_handle, TEMPLATE).notices == []


def test_a_damaged_swap_line_is_skipped_and_the_swap_tests_run_again(tiny_handle, tmp_path, one_record):
    scored = [json.dumps(one_record) + "\n"]
    bad = ['{"key": "a", "swap": 5}\n', "[1]\n", '{"swap": {}}\n']
    folder = _work(tmp_path, tiny_handle, scored=scored, swaps=bad)
    work = Work(folder, tiny_handle, TEMPLATE)
    (notice,) = work.notices
    assert str(folder / SWAPS) in notice and "skipped 3 damaged lines" in notice and "run again" in notice
    assert work.reopen_from == "swap" and work.swaps() == {}
    assert (folder / SWAPS).read_text() == ""


def test_a_named_pipe_as_a_checkpoint_is_refused_without_blocking(tiny_handle, tmp_path):
    for name in (SCORED, SWAPS, STATE):
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        os.mkfifo(folder / name)
        with pytest.raises(DamagedCheckpoint, match=r"is a named pipe.*--restart"):  # refused, never opened
            Work(folder, tiny_handle, TEMPLATE)


def test_every_stage_done_over_empty_checkpoints_scores_the_rows_again(tiny_handle, tmp_path):
    stages = ["crm-basis", "radar", "rows", "swap", "headline", "detectors", "card"]
    ident = {"model": tiny_handle.info.name, "slug": tiny_handle.slug, "template": TEMPLATE}
    folder = _work(tmp_path, tiny_handle, {"identity": ident, "done": stages, "pace": {}}, scored=[], swaps=[])
    work = Work(folder, tiny_handle, TEMPLATE)
    (notice,) = work.notices
    assert "says the rows were scored" in notice and str(folder / SCORED) in notice and "holds no scored row" in notice
    assert work.reopen_from == "rows"


def test_the_page_says_what_a_cancel_kept(tiny_handle, monkeypatch):
    from components import calibrate_view
    from core.model.handle import RunCancelled

    def stopped(*_a, **_k):
        exc = RunCancelled("cancelled on the page")
        exc.add_note("kept 16 rows scored, 5 swap tests and crm-basis, radar, tau, axes (in /x/work); run it again")
        raise exc

    monkeypatch.setattr(calibrate_view, "calibrate_model", stopped)
    job = calibrate_view.CalibrationJob(tiny_handle.info.name, None)
    calibrate_view._run(tiny_handle, job)
    assert job.finished and job.error == (
        "cancelled: kept 16 rows scored, 5 swap tests and crm-basis, radar, tau, axes (in /x/work); run it again"
    )


def test_progress_says_the_stage_and_the_whole_job_s_time_left():
    from types import SimpleNamespace

    from core.evaluation.calibrate.progress import Tracker

    said: list[tuple[int, int, str]] = []
    work = SimpleNamespace(state={"pace": {"rows": 10.0}})
    tracker = Tracker(lambda d, t, text="": said.append((d, t, text)), work, Budget.parse("40"))
    tracker.position = (3, 8)
    tracker.later = lambda: 600.0  # the swap tests, the fits and the card, as the stage table estimates them
    tracker.begin("rows", 40)
    tracker.report(10)
    assert said[-1] == (10, 40, "rows 10/40 (stage 3 of 8) · about 15 min left in all")  # 30 rows × 10 s + 600 s
    tracker.later = lambda: None  # a later stage not measured yet: this stage's time, said to be only that
    tracker.report(34)
    assert said[-1][2] == "rows 34/40 (stage 3 of 8) · about 60 s left in this stage (the next not measured yet)"
    capped = Tracker(lambda d, t, text="": said.append((d, t, text)), work, Budget.parse("2m"))
    capped.later, capped.elapsed = (lambda: 600.0), (lambda: 40.0)
    capped.begin("rows", 40)
    assert said[-1][2] == "rows 0/40 · about 80 s left in all"  # within the budget's 2 minutes
    work.state["pace"]["swap"] = 20.0  # past the cap, a later stage still says its own time (was "about 0 s")
    capped.later, capped.elapsed = (lambda: 60.0), (lambda: 150.0)
    capped.begin("swap", 10)
    assert said[-1][2] == "swap 0/10 · about 4 min left in all"  # 10 × 20 s + 60 s


def test_ctrl_c_on_the_command_line_says_what_was_kept(tiny_handle, monkeypatch, capsys):
    import core.cli.commands.calibrate_model as command
    from core.cli import main

    def interrupted(*_a, **_k):
        exc = KeyboardInterrupt()
        exc.add_note("kept 8 rows scored, 0 swap tests and no artifact yet (in /x/work); run it again")
        raise exc

    monkeypatch.setattr(command, "load_handle", lambda _args: tiny_handle)
    monkeypatch.setattr(command, "calibrate_model", interrupted)
    assert main(["calibrate-model", "--budget", "8"]) == 130
    assert "interrupted: kept 8 rows scored, 0 swap tests and no artifact yet" in capsys.readouterr().err


def test_a_damaged_line_of_the_late_crm_scores_is_skipped_and_read_again(tiny_handle, tmp_path, one_record):
    from core.evaluation.calibrate.checkpoints import CRM_SCORES

    folder = _work(tmp_path, tiny_handle, scored=[json.dumps(one_record) + "\n"])
    (folder / CRM_SCORES).write_text('{"key": "k", "scores": 3}\n7\n', encoding="utf-8")
    work = Work(folder, tiny_handle, TEMPLATE)
    (notice,) = work.notices
    assert str(folder / CRM_SCORES) in notice and "skipped 2 damaged lines" in notice
    assert "their CRM scores are read again" in notice and work.crm_scores() == {}
    assert work.reopen_from is None  # the crm-basis stage always reads what is missing


def test_a_time_capped_run_leaves_the_crm_basis_its_time(tiny_handle):
    from types import SimpleNamespace

    from core.evaluation.calibrate.budget import CRM_COST
    from core.evaluation.calibrate.stages import Run
    from core.methods.crm.prompts import load_calibration_prompts

    n = len(load_calibration_prompts())

    def run(basis=None, done=False, pace=None):
        work = SimpleNamespace(done=lambda stage: done and stage == "crm-basis")
        return SimpleNamespace(basis=basis, work=work, tracker=SimpleNamespace(pace=pace or {"rows": 10.0}))

    assert Run.crm_seconds(run()) == pytest.approx(n * CRM_COST * 10.0)  # before the basis' pace is measured
    assert Run.crm_seconds(run(pace={"rows": 10.0, "crm-basis": 2.0})) == pytest.approx(n * 2.0)
    assert Run.crm_seconds(run(basis=object())) == 0.0 and Run.crm_seconds(run(done=True)) == 0.0


def test_the_rows_stage_reserves_the_swap_tests_at_the_pace_measured_by_then():
    from types import SimpleNamespace

    from core.evaluation.calibrate.budget import FIT_RESERVE_S, SWAP_COST
    from core.evaluation.calibrate.score import rows_reserve
    from core.evaluation.constructions import AGREEING

    def record(relation, swap=None):
        return SimpleNamespace(row=SimpleNamespace(relation=relation), swap=swap)

    records = {"a": record(AGREEING), "b": record(AGREEING), "c": record("conflict"), "d": record(AGREEING, swap={})}
    run = SimpleNamespace(tracker=SimpleNamespace(pace={"rows": 10.0}), crm_seconds=lambda: 300.0)
    # A fresh run has measured no swap test: the two untested agreeing rows are costed SWAP_COST rows each (the
    # run of 2026-12-02 reserved nothing here and overran its 55-minute cap by 14 minutes). The CRM basis is not
    # reserved for: a later stage, it takes what the cap leaves.
    assert rows_reserve(run, records) == pytest.approx(FIT_RESERVE_S + 2 * SWAP_COST * 10.0)
    run.tracker.pace["swap"] = 25.0  # once measured, the swap tests' own pace
    assert rows_reserve(run, records) == pytest.approx(FIT_RESERVE_S + 2 * 25.0)
    assert rows_reserve(run, {}) == pytest.approx(FIT_RESERVE_S)


def test_the_swap_pace_is_measured_on_the_first_batch_of_agreeing_rows_while_the_rows_are_scored(monkeypatch):
    from types import SimpleNamespace

    from core.evaluation.calibrate import score
    from core.evaluation.constructions import AGREEING

    calls = []
    monkeypatch.setattr(score, "_swap_batch", lambda run, part: calls.append([r.key for r in part]))
    monkeypatch.setattr(score, "check_cancelled", lambda: None)

    def record(key, relation, swap=None):
        return SimpleNamespace(key=key, row=SimpleNamespace(relation=relation), swap=swap)

    run = SimpleNamespace(tracker=SimpleNamespace(pace={"rows": 10.0}), batch_size=2)
    records = {"a": record("a", AGREEING), "c": record("c", "conflict")}
    score.measure_swap_pace(run, records)
    assert calls == []  # fewer agreeing rows than a batch: not yet
    records["b"] = record("b", AGREEING)
    records["d"] = record("d", AGREEING, swap={})  # already tested
    score.measure_swap_pace(run, records)
    assert calls == [["a", "b"]]  # the first batch, measured once
    run.tracker.pace["swap"] = 23.0
    records["e"], records["f"] = record("e", AGREEING), record("f", AGREEING)
    score.measure_swap_pace(run, records)
    assert calls == [["a", "b"]]  # measured: the rest wait for the swap stage


def test_the_cap_leaves_the_later_stages_to_a_second_invocation_which_gets_a_cap_of_its_own():
    from types import SimpleNamespace

    from core.evaluation.calibrate.stages import Run

    run = SimpleNamespace(budget=Budget(), elapsed=lambda: 50 * 60.0, late_from=0.0)  # the default: 55 minutes
    assert not Run.over_late_deadline(run, 4 * 60.0) and Run.over_late_deadline(run, 6 * 60.0)
    run.late_from = 48 * 60.0  # the headline was fitted before this invocation began, 2 minutes ago
    assert not Run.over_late_deadline(run, 50 * 60.0) and Run.over_late_deadline(run, 54 * 60.0)
    run.budget = Budget.parse("40")  # a budget in rows has no time cap
    assert not Run.over_late_deadline(run, 1e9)


def test_a_crm_basis_or_pks_the_cap_leaves_out_is_pending_on_the_card_and_done_by_the_next_run(
    tiny_handle, tmp_path, monkeypatch, one_thread
):
    from core.evaluation import headline_fit
    from core.evaluation.calibrate import fits, records, stages
    from tests.unit.evaluation.test_model_calibration import _fewer_prompts, _label, _stand_in_axes

    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    _fewer_prompts(monkeypatch)
    monkeypatch.setattr(headline_fit, "behavior_of", _label)
    monkeypatch.setattr(records, "behavior_of", _label)
    monkeypatch.setattr(fits, "fit_calibration", _stand_in_axes)
    monkeypatch.setattr(stages.Run, "over_late_deadline", lambda self, needed: True)  # the cap is spent
    rows = _write(_rows(), tmp_path / "rows.csv")
    card = calibrate_model(tiny_handle, budget="8", rows_path=rows, settings=SETTINGS, out=tmp_path / "run")
    art = card["artifacts"]
    assert art["crm-basis"]["status"] == "pending" and "do not fit in the time cap" in art["crm-basis"]["note"]
    assert art["redeep-pks"]["status"] == "pending" and "PKS of 8 rows left" in art["redeep-pks"]["note"]
    assert "run the same command again" in art["redeep-pks"]["note"] and art["tau"]["status"] == "fitted"
    monkeypatch.setattr(stages.Run, "over_late_deadline", lambda self, needed: False)  # the next invocation
    card = calibrate_model(tiny_handle, budget="8", rows_path=rows, settings=SETTINGS, out=tmp_path / "run")
    assert card["artifacts"]["crm-basis"]["status"] == "computed"
    assert card["artifacts"]["redeep-pks"]["status"] == "computed"
    assert len((tmp_path / "run" / "work" / "pks.jsonl").read_text().splitlines()) == 8
