"""DualPathSettings: validation, the dict form and reading it back (also from a result)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from components import keys
from components.widgets import SIDEBAR_ORDER, settings_widget_specs
from core.cli.common import add_model_args, check_args, settings_from_args
from core.engine import DualPathResult, DualPathSettings, run_dual_path
from core.engine.settings import setting_specs
from core.model.prompts import TEMPLATE_CHOICES
from core.public import Caps, PublicPolicy


def test_from_dict_round_trips_and_ignores_unknown_keys():
    s = DualPathSettings(max_new_tokens=12, score_window=8, top_k=3, template="A", force_length=True, kl_split=4)
    assert DualPathSettings.from_dict(s.to_dict()) == s
    assert DualPathSettings.from_dict({**s.to_dict(), "added_by_a_newer_version": 1}) == s
    assert DualPathSettings.from_dict({"top_k": 7}) == DualPathSettings(top_k=7)
    with pytest.raises(ValueError, match="dict"):
        DualPathSettings.from_dict(["top_k", 7])  # type: ignore[arg-type]


def test_result_run_settings_is_the_runs_settings(tiny_handle):
    s = DualPathSettings(max_new_tokens=4, score_window=3, top_k=2)
    res = run_dual_path(tiny_handle, "Where is the tower?", "The tower stands in Quillmere.", s)
    assert res.run_settings == s
    assert DualPathResult.from_json(res.to_json()).run_settings == s


# ----------------------------------------------------------------------------------------------------------
# Settings as data: one definition per field, from which validate(), the CLI flags and the sidebar come


def test_every_field_has_one_definition_and_its_default_is_unchanged():
    specs = setting_specs()
    assert list(specs) == [f.name for f in dataclasses.fields(DualPathSettings)]
    # the defaults every pinned number was computed with
    assert DualPathSettings().to_dict() == {
        "max_new_tokens": 64,
        "score_window": 64,
        "top_k": 10,
        "template": "auto",
        "force_length": False,
        "kl_split": 32,
    }
    bounds = {name: (s.low, s.high) for name, s in specs.items() if s.choices is None and s.low is not None}
    assert bounds == {"max_new_tokens": (1, 1024), "score_window": (1, 4096), "top_k": (1, 100), "kl_split": (1, 4096)}
    assert specs["template"].choices == TEMPLATE_CHOICES


@pytest.mark.parametrize("name", ["max_new_tokens", "score_window", "top_k", "kl_split"])
def test_validate_accepts_the_bounds_and_refuses_one_past_them(name):
    spec = setting_specs()[name]
    for inside in (spec.low, spec.high):
        DualPathSettings(**{name: inside}).validate()
    for outside in (spec.low - 1, spec.high + 1):
        with pytest.raises(ValueError, match=rf"^{name} must be between {spec.low} and {spec.high}, got {outside}$"):
            DualPathSettings(**{name: outside}).validate()


def _cli_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_model_args(parser)
    return parser


def _flag_action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


def test_the_cli_the_sidebar_and_validate_agree_on_every_field():
    """Each field's CLI flag, sidebar control and validate() bounds come from one Setting: read all three back
    and compare them, field by field (defaults and bounds)."""
    specs, defaults = setting_specs(), DualPathSettings().to_dict()
    parser, widgets = _cli_parser(), settings_widget_specs(PublicPolicy())
    parsed = vars(parser.parse_args([]))
    for name, spec in specs.items():
        if spec.flag is not None:
            action = _flag_action(parser, spec.flag)
            assert action.dest == spec.dest and action.type is type(defaults[name]), name
            # a flag that follows another field takes its value when left out: same default as the field's
            expected = defaults[name] if spec.follows is None else None
            assert parsed[spec.dest] == expected, name
            if spec.follows is not None:
                assert defaults[name] == defaults[spec.follows], name
        if name in widgets:
            widget = widgets[name]
            assert widget.key == name and getattr(keys, name.upper()) == name, name
            assert widget.default == defaults[name], name
            if spec.choices is None:
                assert (widget.low, widget.high) == (spec.low, spec.high), name
            else:
                assert list(widget.options or ()) == list(spec.choices), name
    assert settings_from_args(parser.parse_args([])) == DualPathSettings(), "the CLI's defaults are the settings'"
    offered = {name for name, spec in specs.items() if spec.widget is not None}
    assert set(widgets) == offered == set(SIDEBAR_ORDER), "every setting with a widget is in the sidebar"
    assert {name for name, spec in specs.items() if spec.flag is None} == {"force_length"}


def test_a_public_cap_lowers_only_the_sidebar_maximum():
    capped = settings_widget_specs(PublicPolicy(public=True))
    assert capped["max_new_tokens"].high == Caps().max_new_tokens < setting_specs()["max_new_tokens"].high
    assert capped["top_k"].high == setting_specs()["top_k"].high


@pytest.mark.parametrize(
    ("name", "value"), [("max_new_tokens", 0), ("score_window", 0), ("top_k", 101), ("kl_split", 4097)]
)
def test_an_out_of_bound_value_gets_the_same_message_on_the_cli_and_in_validate(name, value):
    with pytest.raises(ValueError) as in_validate:
        DualPathSettings(**{name: value}).validate()
    args = _cli_parser().parse_args([str(setting_specs()[name].flag), str(value)])
    with pytest.raises(ValueError) as on_the_cli:  # what core.cli.main runs before any command (exit code 2)
        check_args(args)
    assert str(on_the_cli.value) == str(in_validate.value)


def test_an_unknown_template_gets_the_same_message_on_the_cli_and_in_validate():
    with pytest.raises(ValueError) as in_validate:
        DualPathSettings(template="Z").validate()
    with pytest.raises(ValueError) as on_the_cli:
        check_args(_cli_parser().parse_args(["--template", "Z"]))
    assert str(on_the_cli.value) == str(in_validate.value)


def test_the_cli_has_the_kl_split_and_the_window_follows_max_new_tokens():
    parser = _cli_parser()
    assert settings_from_args(parser.parse_args(["--kl-split", "8"])).kl_split == 8
    s = settings_from_args(parser.parse_args(["--max-new-tokens", "16"]))
    assert (s.max_new_tokens, s.score_window) == (16, 16)
    assert settings_from_args(parser.parse_args(["--max-new-tokens", "16", "--window", "4"])).score_window == 4
