"""Public mode (issue 15): the policy read from the environment, the sidebar's model picker and the cost caps
in AppTest, the session-only τ of the Evaluate page across two sessions, and two sessions queueing for the
one model (the queued notice, first come first served).

Runs on the tiny random Llama (``tiny_app``): a page run takes a second.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from streamlit.testing.v1 import AppTest

from components import keys
from components import queue as run_queue
from core.engine import DualPathSettings, run_dual_path
from core.engine.threshold import EMBEDDED_THRESHOLD, Threshold
from core.model.handle import CancelToken, run_control
from core.public import ALLOWED_ENV, CAP_ENV, PUBLIC_ENV, Caps, PublicPolicy, looks_like_path, parse_allow_list
from tests.app.conftest import APP, ROOT, ok

TIMEOUT = 120
DUAL_PATH = "pages/1_Dual_Path.py"
EVALUATE = "pages/9_Evaluate.py"
SMA = "pages/7_Source_Attribution.py"


@pytest.fixture
def public(monkeypatch):
    """Public mode with one allow-listed hub id (pinned to a revision)."""
    monkeypatch.setenv(PUBLIC_ENV, "1")
    monkeypatch.setenv(ALLOWED_ENV, "org/model-a@v1, org/model-a@v1")
    for var in CAP_ENV.values():
        monkeypatch.delenv(var, raising=False)


# ----------------------------------------------------------------------------------------------------------
# The policy (no Streamlit)


def test_the_policy_is_off_by_default_and_changes_nothing() -> None:
    policy = PublicPolicy.from_env({})
    assert not policy.public and policy.allowed == ()
    assert policy.limit("max_new_tokens", 1024) == 1024
    assert policy.check_model("../../etc") == ("../../etc", None), "outside public mode the loader decides"
    assert policy.describe() == []


def test_public_mode_reads_the_allow_list_and_the_caps() -> None:
    policy = PublicPolicy.from_env(
        {PUBLIC_ENV: "1", ALLOWED_ENV: " org/a , org/b@main,org/a", CAP_ENV["max_new_tokens"]: "32"}
    )
    assert policy.public
    assert [(m.model_id, m.revision) for m in policy.allowed] == [("org/a", None), ("org/b", "main")]
    assert policy.caps == dataclasses.replace(Caps(), max_new_tokens=32)
    assert policy.limit("max_new_tokens", 1024) == 32 and policy.limit("max_new_tokens", 16) == 16
    assert policy.limit("sma_masks", 1024) == Caps().sma_masks
    assert policy.upload_bytes == Caps().upload_mb * 1024 * 1024
    assert policy.sweep_seeds(30, 5) == Caps().sweep_layers // 30 and policy.sweep_seeds(40, 5) == 0
    (line,) = policy.describe()
    assert "org/a" in line and "at most 32 new tokens" in line


@pytest.mark.parametrize(
    "env",
    [
        {PUBLIC_ENV: "maybe"},
        {PUBLIC_ENV: "1", ALLOWED_ENV: "/models/llama"},
        {PUBLIC_ENV: "1", ALLOWED_ENV: "../../etc"},
        {PUBLIC_ENV: "1", ALLOWED_ENV: "https://huggingface.co/org/a"},
        {PUBLIC_ENV: "1", ALLOWED_ENV: "gpt2"},
        {PUBLIC_ENV: "1", CAP_ENV["evaluate_rows"]: "0"},
        {PUBLIC_ENV: "1", CAP_ENV["upload_mb"]: "2.5"},
    ],
)
def test_a_misconfigured_deployment_fails_with_the_variable_named(env) -> None:
    with pytest.raises(ValueError, match="READ_OR_RECALL_"):
        PublicPolicy.from_env(env)


@pytest.mark.parametrize(
    "spec",
    ["../../etc", "/etc", ".", "~/models", "models\\llama", "C:/models", "a/b/c", "gpt2", "org/other", "org/a\x00"],
)
def test_public_mode_refuses_paths_and_ids_off_the_allow_list(spec) -> None:
    policy = PublicPolicy(public=True, allowed=parse_allow_list("org/a@v2"))
    with pytest.raises(ValueError, match="This public app"):
        policy.check_model(spec, "main")


def test_public_mode_loads_the_embedded_model_and_allowed_ids_at_their_pinned_revision() -> None:
    policy = PublicPolicy(public=True, allowed=parse_allow_list("org/a@v2"))
    assert policy.check_model("embedded", "evil") == ("embedded", None)
    assert policy.check_model("org/a", "another-branch") == ("org/a", "v2"), "the visitor's revision is ignored"


def test_paths_are_recognized_even_when_they_look_like_ids(tmp_path, monkeypatch) -> None:
    (tmp_path / "org" / "a").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert looks_like_path("org/a"), "an existing folder is a path"
    assert not looks_like_path("org/b")
    policy = PublicPolicy(public=True, allowed=parse_allow_list("org/a"))
    with pytest.raises(ValueError, match="folder"):
        policy.check_model("org/a")


# ----------------------------------------------------------------------------------------------------------
# The app in public mode


def test_the_public_picker_offers_only_the_embedded_model_and_the_allow_list(tiny_app, public) -> None:
    at = ok(AppTest.from_file(APP, default_timeout=TIMEOUT).run())
    radio = at.radio(key=keys.widget_key(keys.MODEL_CHOICE))
    assert radio.options == [
        at.radio(key=keys.widget_key(keys.MODEL_CHOICE)).options[0],
        "org/model-a @ v1",
    ], "the allow-list, once, with its pinned revision"
    assert not any(t.key == keys.widget_key(keys.MODEL_ID) for t in at.text_input), "nothing can be typed"
    assert any("Public mode" in c.value and "at most 128 new tokens" in c.value for c in at.sidebar.caption)
    assert at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).max == Caps().max_new_tokens


def test_a_forged_local_path_is_never_loaded_in_public_mode(tiny_app, public, use_loader) -> None:
    asked: list[str] = []

    def load(spec=None, revision=None, **kwargs):
        asked.append(spec)
        return tiny_app

    use_loader(load)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state[keys.store_key(keys.MODEL_CHOICE)] = "custom"  # what the old picker stored
    at.session_state[keys.store_key(keys.MODEL_ID)] = "../../etc"
    ok(at.run())
    assert asked == ["embedded"], f"only the embedded model was loaded: {asked}"

    def script() -> None:
        from components.page import get_handle

        get_handle("../../etc")

    direct = ok(AppTest.from_function(script, default_timeout=TIMEOUT).run())
    (error,) = [e.value for e in direct.error]
    assert "does not load models from folders" in error
    assert asked == ["embedded"], "the loader was never asked for the path"


def test_cost_caps_lower_the_widgets_maximum_and_are_stated(tiny_app, public, monkeypatch) -> None:
    monkeypatch.setenv(CAP_ENV["evaluate_rows"], "3")
    at = ok(AppTest.from_file(APP, default_timeout=TIMEOUT).run().switch_page(SMA).run())
    assert at.number_input(key=keys.widget_key(keys.SMA_N_SAMPLES)).max == Caps().sma_masks
    assert at.number_input(key=keys.widget_key(keys.SMA_MAX_NEW_TOKENS)).max == Caps().max_new_tokens

    at = ok(at.switch_page(EVALUATE).run())
    assert (ROOT / "assets" / "probes" / "probes.csv").is_file(), "the bundled probe set the cap is shown on"
    rows = next(n for n in at.number_input if n.key and n.key.startswith(keys.widget_key(keys.EVAL_SAMPLE)))
    assert rows.max == 3 and rows.value == 3
    assert any("at most 3 rows per run" in c.value for c in at.caption)
    upload_label = "up to 2 MiB"
    at.radio(key=keys.widget_key(keys.EVAL_SOURCE)).set_value("Upload a CSV").run()
    assert any(upload_label in u.label for u in at.file_uploader if u.key == keys.EVAL_UPLOAD)


def test_a_stored_value_above_a_cap_is_lowered_with_a_note(tiny_app, public) -> None:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state[keys.store_key(keys.MAX_NEW_TOKENS)] = 900  # e.g. restored from a shared link
    ok(at.run())
    assert at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).value == Caps().max_new_tokens
    assert any("900 is outside 1–128" in c.value for c in at.sidebar.caption), "never replaced silently"


def test_the_window_widget_never_takes_zero(tiny_app) -> None:
    """``--window 0`` is refused by the CLI. In the app the T box's minimum is 1: a browser refuses 0 itself
    ("Please enter a value greater than or equal to 1", Streamlit's number input) and keeps the old value; a 0
    that reaches the server anyway is never used as T (Streamlit clamps a widget value; a stored value out of
    range is moved to the bound with a note, see the test above)."""
    at = ok(AppTest.from_file(APP, default_timeout=TIMEOUT).run())
    assert at.number_input(key=keys.widget_key(keys.SCORE_WINDOW)).min == 1
    at.number_input(key=keys.widget_key(keys.SCORE_WINDOW)).set_value(0).run()
    assert at.number_input(key=keys.widget_key(keys.SCORE_WINDOW)).value >= 1
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state[keys.store_key(keys.SCORE_WINDOW)] = 0
    ok(at.run())
    assert at.number_input(key=keys.widget_key(keys.SCORE_WINDOW)).value == 1
    assert any("Score window T (answer tokens): 0 is outside 1–4096" in c.value for c in at.sidebar.caption)


# ----------------------------------------------------------------------------------------------------------
# The τ of "use this τ for the whole app" is this visitor's only


def test_a_tau_used_for_the_whole_app_applies_to_that_session_only(tiny_app) -> None:
    mine = Threshold.load(EMBEDDED_THRESHOLD)
    # a constant τ (no length-aware τ(L)), so the τ a run applies is 11.25 itself
    mine = dataclasses.replace(mine, tau=11.25, model=tiny_app.info.name, source="A's calibration", length_tau=None)
    visitor_a = ok(AppTest.from_file(APP, default_timeout=TIMEOUT).run().switch_page(EVALUATE).run())
    visitor_b = ok(AppTest.from_file(APP, default_timeout=TIMEOUT).run().switch_page(EVALUATE).run())
    upload = visitor_a.file_uploader(key=keys.EVAL_TAU_UPLOAD)
    upload.set_value(("mine.json", mine.to_json().encode(), "application/json")).run()
    ok(visitor_a.button(key=keys.EVAL_USE_LOADED_TAU).click().run())
    assert any("τ = 11.250 nats" in e.label for e in visitor_a.expander)

    ok(visitor_b.run())
    assert not visitor_b.session_state[keys.THRESHOLDS], "B's session has no τ of its own"
    assert not any("11.250" in e.label for e in visitor_b.expander), "B still sees the default τ"

    taus = []
    for at in (visitor_a, visitor_b):
        ok(at.switch_page(DUAL_PATH).run())
        at.session_state[keys.store_key(keys.MAX_NEW_TOKENS)] = 4
        at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
        at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.")
        ok(at.button(key=keys.RUN).click().run())
        (result,) = at.session_state[keys.RESULTS].values()
        taus.append((result.threshold, result.threshold_source))
    assert taus[0] == (11.25, "loaded from mine.json (A's calibration)"), taus
    assert taus[1][0] != 11.25 and "mine.json" not in str(taus[1][1]), taus


# ----------------------------------------------------------------------------------------------------------
# Two sessions queue for the one model


def test_a_session_queued_behind_two_runs_is_told_and_served_in_turn(tiny_app, monkeypatch) -> None:
    """Visitor X holds the model, visitor Y queues (a run through the handle on its own thread), then this
    AppTest session presses Run: it sees 2 runs ahead, then 1, then runs after Y; nothing is mixed.

    (Two AppTest sessions cannot run their scripts at the same time in one process, so Y is a plain run.)"""
    told: list[int] = []

    def spy(ahead: int, waited_s: float) -> str:
        told.append(ahead)
        return f"Queued: {ahead}"

    monkeypatch.setattr(run_queue, "queued_text", spy)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state[keys.store_key(keys.MAX_NEW_TOKENS)] = 4
    ok(at.run().switch_page(DUAL_PATH).run())
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Question of Z?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("Context of Z.")

    release = threading.Event()
    order: list[str] = []
    y_result = []

    def visitor_x() -> None:
        with tiny_app.session():
            release.wait(TIMEOUT)
        order.append("X")

    def visitor_y() -> None:
        with run_control(cancel=CancelToken()):
            y_result.append(
                run_dual_path(tiny_app, "Question of Y?", "Context of Y.", DualPathSettings(max_new_tokens=4))
            )
        order.append("Y")

    def release_when_z_waits() -> None:
        deadline = time.monotonic() + 60
        while tiny_app.waiting() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # Z's notice is drawn while it waits
        release.set()

    threads = [threading.Thread(target=f, daemon=True) for f in (visitor_x, visitor_y, release_when_z_waits)]
    threads[0].start()
    _wait(lambda: tiny_app.is_busy())
    threads[1].start()
    _wait(lambda: tiny_app.waiting() == 1)
    threads[2].start()
    ok(at.button(key=keys.RUN).click().run())  # blocks until Z's run is done
    order.append("Z")
    for t in threads:
        t.join(TIMEOUT)
    assert order == ["X", "Y", "Z"], "first come, first served"
    assert told and told[0] == 2 and 1 in told and told[-1] == 1, f"Z was told how many runs were ahead: {told}"
    (z_result,) = at.session_state[keys.RESULTS].values()
    assert z_result.query == "Question of Z?" and y_result[0].query == "Question of Y?", "nothing mixed"
    assert not any("Queued" in i.value for i in at.info), "the notice is gone once the run started"
    assert tiny_app.waiting() == 0 and not tiny_app.is_busy()


def test_a_newer_page_run_of_the_session_cancels_the_older_one() -> None:
    """One run per visitor: when a newer page run of the same session starts (any click, with Streamlit's fast
    reruns the old script thread keeps going until its next Streamlit call), the older run's token ends it at
    its next token or batch with Streamlit's own stop exception; another session's token is untouched."""
    from streamlit.runtime.scriptrunner import StopException

    mine, other = run_queue.SessionRuns(), run_queue.SessionRuns()
    first = run_queue.make_token(mine, 1)
    theirs = run_queue.make_token(other, 1)
    first.raise_if_cancelled()  # still wanted
    run_queue.make_token(mine, 2)
    with pytest.raises(StopException):
        first.raise_if_cancelled()
    theirs.raise_if_cancelled()


def _wait(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_an_evaluate_run_over_the_token_budget_is_refused_before_it_starts(tiny_app, public) -> None:
    """Issue 25 item 10: Evaluate with SMA on the capped rows fitted every cap and still cost ~10^6 tokens."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state[keys.store_key(keys.EVAL_DETECTORS)] = ["repcs", "sma"]
    at = ok(at.run().switch_page(EVALUATE).run())
    ok(next(b for b in at.button if b.key.startswith(keys.EVAL_SAMPLE_ALL)).click().run())  # every capped row
    assert any("over this public app's budget of 50,000" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key=keys.scoped(keys.EVAL_JOB_MAIN, "run")).disabled
    at.session_state[keys.store_key(keys.EVAL_DETECTORS)] = ["repcs"]
    at = ok(at.run())
    assert any("this app's budget: 50,000 per run" in c.value for c in at.caption)
    assert not at.button(key=keys.scoped(keys.EVAL_JOB_MAIN, "run")).disabled
