"""core.cli.commands.detect: the ``--sma-*`` flags (shared with ``bench/sma.py``) give checked SMA settings."""

from __future__ import annotations

import argparse

import pytest

from core.cli.commands.detect import add_sma_args, sma_settings_from_args
from core.methods.sma import SMASettings


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sma_args(parser)
    return parser.parse_args(list(argv))


def test_the_flag_defaults_are_the_sma_defaults():
    assert sma_settings_from_args(_parse()) == SMASettings()


def test_flags_and_extra_fields_reach_the_settings():
    args = _parse("--sma-samples", "8", "--sma-granularity", "sentence", "--sma-method", "shapley",
                  "--sma-scope", "query+context", "--sma-max-new-tokens", "5")  # fmt: skip
    settings = sma_settings_from_args(args, batch_size=3, template="A")
    assert (settings.n_samples, settings.granularity, settings.method, settings.scope) == (
        8, "sentence", "shapley", "query+context",
    )  # fmt: skip
    assert (settings.max_new_tokens, settings.batch_size, settings.template) == (5, 3, "A")


def test_a_setting_out_of_bounds_is_refused():
    with pytest.raises(ValueError, match="n_samples must be between 1 and 4096, got 0"):
        sma_settings_from_args(_parse("--sma-samples", "0"))
