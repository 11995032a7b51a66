"""``core.engine.threshold.tau_in_force``: the one meaning of an unset τ, asked by the engine, ``evaluate``, the CLI
and the Evaluate page."""

from __future__ import annotations

import argparse

import pytest

from core.cli.common import threshold_from_args
from core.engine.scoring import resolve_threshold
from core.engine.tau_resolution import tau_in_force, threshold_for
from core.engine.threshold import (
    TAU_LENGTH,
    TAU_PAPER,
    LengthTau,
    Threshold,
)
from core.model.loading import EMBEDDED_NAME


def _tau() -> Threshold:
    lt = LengthTau(intercept=0.0, slope=0.5, alpha=0.05, L_min=2, L_max=40, n=50)
    return Threshold(tau=5.0, alpha=0.05, T=64, model="m", source="s", length_tau=lt)


def test_a_given_tau_is_kept_as_the_length_setting_applies_it():
    given = _tau()
    assert tau_in_force("m", given) == (given, "given")
    assert tau_in_force("m", given, "from a file")[1] == "from a file"


def test_the_paper_setting_makes_a_given_tau_constant():
    applied, _ = tau_in_force("m", _tau(), mode=TAU_PAPER)
    assert applied.length_tau is None and applied.tau == 5.0 and applied.mode == TAU_PAPER


@pytest.mark.parametrize("mode", [TAU_LENGTH, TAU_PAPER])
def test_an_unset_tau_is_the_models_default_under_the_setting(mode):
    assert tau_in_force(EMBEDDED_NAME, mode=mode) == threshold_for(EMBEDDED_NAME, mode=mode)
    assert tau_in_force(EMBEDDED_NAME, source="mine", mode=mode)[1] == "mine"


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="unknown τ setting"):
        tau_in_force("m", mode="sometimes")


def test_the_engine_and_the_cli_ask_the_same_function(tiny_handle):
    assert resolve_threshold(tiny_handle, None, None) == tau_in_force(tiny_handle.info.name)
    given = _tau()
    assert resolve_threshold(tiny_handle, given, None) == (given, "given")
    args = argparse.Namespace(threshold_file=None, tau_mode=TAU_PAPER, model=None)
    assert threshold_from_args(args, EMBEDDED_NAME) == tau_in_force(EMBEDDED_NAME, mode=TAU_PAPER)
    args.tau_mode = TAU_LENGTH
    assert threshold_from_args(args, EMBEDDED_NAME) == (None, None)  # the engine decides, with the loaded model
