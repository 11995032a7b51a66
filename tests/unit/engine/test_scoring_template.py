"""The template-mismatch warning compares resolved templates (issue 11): a τ calibrated with ``auto`` does
not warn against a run that chooses ``chat`` explicitly when ``auto`` resolves to ``chat``."""

from __future__ import annotations

from core.engine import DualPathSettings, calibration_mismatch, run_dual_path
from core.engine.threshold import Threshold


def _tau(template: str) -> Threshold:
    return Threshold(tau=5.0, alpha=0.05, T=8, model="tiny-random-llama", source="test", extra={"template": template})


def _template_warnings(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "template" in w]


def test_auto_and_explicit_chat_do_not_warn(tiny_handle):
    tok = tiny_handle.tokenizer  # has a chat template: auto → chat
    chat = DualPathSettings(max_new_tokens=8, score_window=8, template="chat")
    auto = DualPathSettings(max_new_tokens=8, score_window=8, template="auto")
    assert _template_warnings(calibration_mismatch(_tau("auto"), chat, tok)) == []  # the old code warned here
    assert _template_warnings(calibration_mismatch(_tau("chat"), auto, tok)) == []
    plain = DualPathSettings(max_new_tokens=8, score_window=8, template="A")
    assert len(_template_warnings(calibration_mismatch(_tau("auto"), plain, tok))) == 1
    assert len(_template_warnings(calibration_mismatch(_tau("chat"), plain, tok))) == 1


def test_run_result_carries_no_template_warning(tiny_handle):
    settings = DualPathSettings(max_new_tokens=3, score_window=8, template="chat")
    res = run_dual_path(tiny_handle, "Who built it?", "Orrin built it.", settings, threshold=_tau("auto"))
    assert _template_warnings(res.warnings) == []
    res = run_dual_path(
        tiny_handle,
        "Who built it?",
        "Orrin built it.",
        DualPathSettings(max_new_tokens=3, score_window=8, template="B"),
        threshold=_tau("auto"),
    )
    assert len(_template_warnings(res.warnings)) == 1
