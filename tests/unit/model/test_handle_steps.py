"""core.model.handle (issue 14): ``on_each_step`` hears every generation step of a batch once."""

from __future__ import annotations

import pytest

from core.engine import DualPathSettings
from core.engine.generation import generate_greedy
from core.model.handle import on_each_step, report_step

pytestmark = pytest.mark.usefixtures("one_thread")


def test_every_generation_step_of_a_batch_is_reported_once(tiny_handle) -> None:
    steps: list[int] = []
    settings = DualPathSettings(max_new_tokens=5, force_length=True)
    with on_each_step(lambda: steps.append(1)):
        out = generate_greedy(tiny_handle, [[1, 2, 3], [4, 5]], settings)
    assert [len(ids) for ids, _, _ in out] == [5, 5]
    assert len(steps) == 5, "one step per new token of the whole batch, not per row"
    generate_greedy(tiny_handle, [[1, 2, 3]], settings)
    report_step()  # outside the block: nobody listens, nothing fails
    assert len(steps) == 5
