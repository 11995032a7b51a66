"""components.evaluate_calibration on the Evaluate page (tiny random model): a τ set on fewer clean rows than
⌈1/α⌉ is adopted only through an explicit "use anyway" with the reason shown (issue 26 item 4), and the τ in
force is described as what it is — never a constant τ labeled as the length-aware one (item 5)."""

from __future__ import annotations

from components import keys
from components.evaluate_calibration import adoption_problems
from tests.app.conftest import evaluate_upload, ok

MAIN = "ror.eval.job.main"
TIMEOUT = 180
EIGHT = (
    b"query,context,label\n"
    b"What is the capital of France?,Paris is the capital of France.,memorized\n"
    b"Who wrote Hamlet?,Hamlet is a tragedy by William Shakespeare.,memorized\n"
    b"What is the chemical symbol for gold?,Gold has the chemical symbol Au.,memorized\n"
    b"What is the largest planet?,Jupiter is the largest planet.,memorized\n"
    b"What is the capital of Veltria?,The capital of Veltria is Marrowgate.,grounded\n"
    b"Who founded the Orrin Guild?,The Orrin Guild was founded by Tamsin Vell.,grounded\n"
    b"How many moons does Kessarine have?,The planet Kessarine has five moons.,grounded\n"
    b"Who painted the Lumen Gate?,The Lumen Gate was painted by Oria Fen.,grounded\n"
)


class _Report:
    def __init__(self, n_calibration, fpr=0.0, fnr=0.0):
        self.n_calibration, self.fpr_heldout, self.fnr_heldout = n_calibration, fpr, fnr


def test_too_few_clean_rows_is_a_reason_not_to_adopt_without_a_second_thought():
    (reason,) = adoption_problems(_Report(2), 0.05)
    assert "only 2 clean rows" in reason and "⌈1/α⌉ = 20" in reason
    assert adoption_problems(_Report(20), 0.05) == []
    assert adoption_problems(_Report(10), 0.1) == [], "⌈1/0.1⌉ = 10 rows are enough at α = 0.1"


def test_adopting_a_tau_from_two_clean_rows_needs_use_anyway(tiny_own_tau) -> None:
    at = evaluate_upload(EIGHT, ["repcs"], timeout=TIMEOUT)
    assert at.session_state[MAIN].n_done == 8
    at.radio(key=keys.EVAL_CAL_MODE).set_value("Rows I pick").run()
    picker = at.multiselect(key=keys.EVAL_CAL_ROWS)
    ok(picker.set_value(list(picker.options)[:2]).run())  # τ from 2 clean rows, 2 held out
    assert not at.error, [e.value for e in at.error]
    use = at.button(key=keys.EVAL_USE_TAU)
    assert use.disabled, "not one click away"
    assert any("only 2 clean rows" in w.value and "⌈1/α⌉ = 20" in w.value for w in at.warning), "the reason shown"
    confirm = at.checkbox(key=keys.EVAL_TAU_CONFIRM)
    assert "anyway" in confirm.label
    ok(confirm.check().run())
    assert not at.button(key=keys.EVAL_USE_TAU).disabled

    (in_force,) = [c.value for c in at.caption if c.value.startswith("In force now:")]
    assert in_force.startswith("In force now: length-aware τ(L) from "), in_force  # its own τ(L), as it is
    at.radio(key=keys.widget_key(keys.TAU_MODE)).set_value("paper").run()
    (in_force,) = [c.value for c in at.caption if c.value.startswith("In force now:")]
    assert in_force.startswith("In force now: τ = ") and "one constant τ" in in_force, in_force
    assert "length-aware τ(L)" not in in_force, in_force
