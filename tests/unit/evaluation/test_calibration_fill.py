"""The calibration's fill (:mod:`core.evaluation.calibrate.fill`): the calibration slots go to the stratum that has
shown the short behavior most, the report units keep their seeded order, scored units come first."""

from __future__ import annotations

from types import SimpleNamespace

from core.engine.verdict import READ, RECALLED
from core.evaluation.calibrate.fill import WARMUP_LABELS, Filler
from core.evaluation.calibrate.rows import Unit
from core.evaluation.constructions import CALIBRATION, REPORT, ValidationRow
from core.evaluation.headline_fit import row_key
from core.evaluation.model_card import fill_lines


def _unit(split: str, source: str, i: int) -> Unit:
    construction = "prose" if source == "nq_swap" else "templated"
    row = ValidationRow(construction, "conflict", source, f"q {source} {split} {i}?", f"c {i}.", ["a"], ["b"],
                        split=split)  # fmt: skip
    return Unit(f"{split}:{source}:{i}", split, [row])


def _order() -> list[Unit]:
    """Calibration and report units alternating, the calibration ones alternating two strata."""
    out = []
    for i in range(40):
        out.append(_unit(CALIBRATION, "nq_swap" if i % 2 == 0 else "rome", i))
        out.append(_unit(REPORT, "nq_swap" if i % 2 == 0 else "rome", i))
    return out


def _score(records: dict, units: list[Unit], label_of) -> None:
    for u in units:
        for r in u.rows:
            records[row_key(r)] = SimpleNamespace(row=r, swap=None, label=label_of(u))


def test_before_the_warmup_the_seeded_order_is_kept() -> None:
    order = _order()
    filler = Filler(order, {})
    assert [u.key for u in filler.next_units(10)] == [u.key for u in order[:10]]
    assert filler.short() is None and filler.moved == {}


def test_the_calibration_slots_fill_the_short_behavior_and_the_report_order_is_kept() -> None:
    order = _order()
    records: dict = {}
    filler = Filler(order, records)
    # rome rows recall, nq_swap rows read: 3 of 4 read overall → recalled is short once warmed up
    label = lambda u: RECALLED if u.rows[0].source == "rome" and int(u.key.rsplit(":", 1)[1]) % 4 == 1 else READ  # noqa: E731
    first = filler.next_units(2 * WARMUP_LABELS + 8)
    _score(records, first, label)
    assert filler.short() == RECALLED
    later = filler.next_units(20)
    cal = [u for u in later if u.split == CALIBRATION]
    assert cal and all(u.rows[0].source == "rome" for u in cal)  # the stratum that recalled
    rep_seen = [u.key for u in first + later if u.split == REPORT]
    assert rep_seen == [u.key for u in order if u.split == REPORT][: len(rep_seen)]  # report: seeded order
    assert filler.moved.get("templated/rome", {}).get(RECALLED, 0) > 0
    assert fill_lines(filler.to_dict()) and "templated/rome" in fill_lines(filler.to_dict())[0]
    # every unit handed out once
    rest = filler.next_units(1000)
    keys = [u.key for u in first + later + rest]
    assert len(keys) == len(set(keys)) == len(order)


def test_a_resumed_run_gets_its_scored_units_first() -> None:
    order = _order()
    records: dict = {}
    _score(records, [order[7], order[30]], lambda u: READ)
    filler = Filler(order, records)
    assert [u.key for u in filler.next_units(2)] == [order[7].key, order[30].key]


def test_a_row_labeled_by_its_swap_test_is_not_counted_while_scoring() -> None:
    order = _order()
    records: dict = {}
    for u in order[:40]:
        r = u.rows[0]
        records[row_key(r)] = SimpleNamespace(row=r, swap=object(), label=RECALLED)
    assert Filler(order, records).counts() == {}
