"""core.detectors.registry: :func:`declare` registers a family's table of detectors, and the declared families
(CRM, Self-Critique, SMA, RADAR) keep every field they had as ``register(Detector(...))`` blocks."""

from __future__ import annotations

import hashlib
import json

import pytest

from core.detectors import available, registry
from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH, SOURCE_ATTRIBUTION, declare

DECLARED = ("crm_l1", "crm_lts", "crm_l2", "crm_lr", "selfcritique", "sma", "radar")
DECLARED_DIGEST = "119305198afb622bd64c13c61b0c67ee52f5f3861d16d00f393882e4a7a9b323"
"""sha256 of the JSON of every declared detector's (name, label, higher_means, cost, group, source, needs_fit),
taken from the ``register(Detector(...))`` blocks before they became tables: a label or source that changes
changes it."""


def _zero(inp: registry.DetectorInput) -> float:
    return 0.0


@pytest.fixture
def empty_registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, registry.Detector]:
    fresh: dict[str, registry.Detector] = {}
    monkeypatch.setattr(registry, "REGISTRY", fresh)
    return fresh


def test_declare_registers_one_detector_per_row_with_the_shared_fields(empty_registry) -> None:
    made = declare(
        {"name": "a", "label": "A", "score": _zero},
        {"name": "b", "label": "B", "score": _zero, "cost": "heavy", "group": SOURCE_ATTRIBUTION},
        higher_means=MEMORIZED_HIGH,
        cost="forward",
    )
    assert [d.name for d in made] == ["a", "b"] == list(empty_registry)
    assert [d.cost for d in made] == ["forward", "heavy"], "a row's own value wins over the shared one"
    assert {d.higher_means for d in made} == {MEMORIZED_HIGH}
    assert [d.group for d in made] == [registry.CONTEXT_RELIANCE, SOURCE_ATTRIBUTION]


def test_declare_refuses_an_unknown_field_or_direction(empty_registry) -> None:
    with pytest.raises(TypeError):
        declare({"name": "a", "label": "A", "score": _zero, "colour": "red"}, higher_means=GROUNDED_HIGH)
    with pytest.raises(ValueError, match="higher_means"):
        declare({"name": "a", "label": "A", "score": _zero, "higher_means": "sideways"})
    assert not empty_registry


def test_the_declared_families_keep_their_fields() -> None:
    detectors = available()
    rows = [
        [d.name, d.label, d.higher_means, d.cost, d.group, d.source, d.needs_fit]
        for d in (detectors[name] for name in DECLARED)
    ]
    digest = hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()
    assert digest == DECLARED_DIGEST
    directions = {name: detectors[name].higher_means for name in DECLARED}
    assert directions == {
        "crm_l1": GROUNDED_HIGH,
        "crm_lts": MEMORIZED_HIGH,
        "crm_l2": MEMORIZED_HIGH,
        "crm_lr": MEMORIZED_HIGH,
        "selfcritique": MEMORIZED_HIGH,
        "sma": GROUNDED_HIGH,
        "radar": MEMORIZED_HIGH,
    }
    assert [detectors[name].cost for name in DECLARED] == [
        "generate",
        "forward",
        "forward",
        "forward",
        "generate",
        "heavy",
        "forward",
    ]
