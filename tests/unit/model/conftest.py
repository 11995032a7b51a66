"""Fixtures of the family matrix (``test_families.py``): each decoder family's tiny model, saved once per session
and loaded as a user loads a folder, and ``fam``, which runs a test on every family and checks no hook is left."""

from __future__ import annotations

import pytest
import torch

from core.model.families import FAMILIES
from tests.families import VARIANTS, save_family

KEYS = sorted(FAMILIES) + sorted(VARIANTS)
"""Every family of ``core.model.families`` and every variant of ``tests/families.py``."""


@pytest.fixture(scope="session")
def family_folders(tmp_path_factory):
    """``folder(key)``: the family's saved tiny model (built once per session)."""
    root = tmp_path_factory.mktemp("families")
    built: dict[str, object] = {}

    def folder(key: str):
        if key not in built:
            built[key] = save_family(key, root / key)
        return built[key]

    return folder


@pytest.fixture(scope="session")
def family_handles(family_folders):
    """``handle(key)``: the family's model loaded as a user loads a folder (CPU, fp32), with its hook baseline."""
    from core.methods.ablation import count_hooks
    from core.model.loading import load_model

    loaded: dict[str, tuple[object, int]] = {}

    def handle(key: str):
        if key not in loaded:
            h = load_model(str(family_folders(key)), device="cpu")
            with torch.inference_mode():  # transformers installs its own output-capturing hooks once
                h.model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True, output_attentions=True)
            loaded[key] = (h, count_hooks(h.model))
        return loaded[key][0]

    handle.baseline = lambda key: loaded[key][1]  # type: ignore[attr-defined]
    return handle


@pytest.fixture(params=KEYS)
def fam(request, family_handles):
    """``(key, handle)`` of each family; after the test, no hook of ours is left on the model."""
    from core.methods.ablation import count_hooks

    key = request.param
    h = family_handles(key)
    yield key, h
    assert count_hooks(h.model) == family_handles.baseline(key), f"{key}: a hook was left behind"
