"""RADAR's 37 feature specs and names against appendix D, and the feature vector."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from core.methods import radar
from core.methods.radar import features


def test_feature_names_match_appendix_d(paper_surface, paper_mechanistic):
    assert len(radar.FEATURES) == 37
    assert list(radar.SURFACE_FEATURES) == paper_surface  # 16, appendix D.1 order
    assert list(radar.MECHANISTIC_FEATURES) == paper_mechanistic  # 21, appendix D.2 order
    assert list(radar.FEATURE_NAMES) == paper_surface + paper_mechanistic
    assert all(f.formula for f in radar.FEATURES)
    assert {f.kind for f in radar.FEATURES} == {"int", "float"}
    proxies = {f.name for f in radar.FEATURES if f.proxy}
    # appendix F.1: causal effects, activation patching, critical components, working memory (+ constant depths)
    assert {
        "direct_logit_attribution",
        "activation_patching_effect",
        "critical_component_count",
        "working_memory_complexity",
        "indirect_effect_strength",
        "causal_mediation_score",
    } <= proxies
    assert not proxies & set(paper_surface)


SPECS_DIGEST = "ad30e24ae8dd6228afde776ce15316c58130cdea9ddb6538af709757e4d1bff0"
"""sha256 of the JSON of every FeatureSpec (all fields, in order), taken from the FeatureSpec(...) blocks before the
specs became one table: a name, group, subgroup, kind, formula, proxy or note that changes changes it."""


def test_every_spec_is_unchanged():
    specs = [dataclasses.asdict(f) for f in radar.FEATURES]
    assert hashlib.sha256(json.dumps(specs, ensure_ascii=False).encode()).hexdigest() == SPECS_DIGEST


def test_every_note_and_proxy_names_a_feature():
    assert set(features._NOTES) | set(features._PROXIES) <= set(radar.FEATURE_NAMES)
    assert set(features._GROUPS) == {f.subgroup for f in radar.FEATURES}, "each subgroup has its group"


def test_one_tau_everywhere():
    assert radar.SPECIALIZATION_TAU == features.SPECIALIZATION_TAU == 1.5
    assert "τ = 1.5" in features.FEATURE_SPECS["num_specialized_heads"].formula


def test_feature_vector_order_and_missing_names():
    values = {name: float(i) for i, name in enumerate(reversed(radar.FEATURE_NAMES))}
    vec = radar.feature_vector(values)
    assert vec.dtype == np.float64 and vec.shape == (37,)
    assert vec.tolist() == [values[n] for n in radar.FEATURE_NAMES]
    del values["attention_entropy"]
    with pytest.raises(ValueError, match="attention_entropy"):
        radar.feature_vector(values)
