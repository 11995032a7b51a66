"""core.methods.sma.settings: each SMA setting's default, bounds and words are defined once, and the CLI flags, the
page's form, the detector and its estimate take them from there."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from core.cli.commands.detect import add_sma_args, sma_settings_from_args
from core.detectors.sma import DEFAULTS, settings_for
from core.methods.sma import SMASettings
from core.methods.sma.settings import sma_setting_specs


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sma_args(parser)
    return parser.parse_args(list(argv))


def test_every_field_has_one_definition():
    specs = sma_setting_specs()
    assert list(specs) == [f.name for f in dataclasses.fields(SMASettings)]
    for name, spec in specs.items():
        default = getattr(SMASettings(), name)
        if spec.choices is not None:
            assert default in spec.choices, name
        elif spec.low is not None:
            assert spec.low <= default <= spec.high, name


def test_the_cli_flags_default_to_the_settings_defaults():
    assert sma_settings_from_args(_args()) == SMASettings()
    assert SMASettings() == DEFAULTS


@pytest.mark.parametrize(
    ("flag", "value", "name"), [("--sma-samples", "4097", "n_samples"), ("--sma-max-new-tokens", "0", "max_new_tokens")]
)
def test_a_flag_out_of_bounds_gets_the_definitions_message(flag, value, name):
    spec = sma_setting_specs()[name]
    with pytest.raises(ValueError, match=f"{name} must be between {spec.low} and {spec.high}, got {value}"):
        sma_settings_from_args(_args(flag, value))


def test_the_page_form_reads_the_same_bounds():
    from components import sma_controls

    for name in ("gamma_length", "gamma_similarity", "alpha", "seed"):
        spec = sma_setting_specs()[name]
        assert sma_controls._bounds(name) == (spec.low, spec.high, spec.step)
    drawn = {name for column in sma_controls.SETTINGS_FORM for name in column}
    assert drawn <= set(sma_setting_specs())


@pytest.mark.parametrize("name", ["gamma_length", "alpha", "seed", "batch_size"])
def test_validate_refuses_a_value_outside_the_definition(name):
    spec = sma_setting_specs()[name]
    with pytest.raises(ValueError, match=name):
        SMASettings(**{name: type(getattr(SMASettings(), name))(spec.high + 1)}).validate()


def test_the_detector_caps_the_default_answer_at_the_runs(tiny_handle):
    from core.detectors.registry import DetectorInput
    from core.engine import DualPathSettings

    inp = DetectorInput(tiny_handle, None, DualPathSettings(max_new_tokens=8))  # type: ignore[arg-type]
    assert settings_for(inp).max_new_tokens == 8
    inp = DetectorInput(tiny_handle, None, DualPathSettings(max_new_tokens=200))  # type: ignore[arg-type]
    assert settings_for(inp).max_new_tokens == DEFAULTS.max_new_tokens
