"""What every ``python -m core`` command shares: the model/settings flags, and the one way to load the model.

A command adds the flags with :func:`add_model_args` and turns them into objects with
:func:`settings_from_args`, :func:`threshold_from_args` and :func:`load_handle` (or :func:`run_from_args`,
which does all three and runs the dual path once; :func:`write_result` prints it). Tests replace the model
by patching :func:`load_model` in this module (the one seam), e.g.
``monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)``.

Every argument is checked before the model is loaded or anything is scored: :func:`check_args` (run by
``core.cli.main`` for every command) refuses text that is not valid UTF-8, an empty ``--model`` and a
``--window`` below 1; a command checks its own values and its output locations
(:func:`core.io.check_output_path`) before it calls :func:`load_handle`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from tqdm import tqdm

from core.engine import DualPathResult, DualPathSettings, run_dual_path
from core.engine.calibration_record import record_for
from core.engine.settings import setting_defaults, setting_specs
from core.engine.tau_resolution import resolve_tau, tau_in_force
from core.engine.threshold import (
    DEFAULT_TAU_MODE,
    TAU_MODES,
    Threshold,
    load_threshold,
)
from core.maths.metrics import MAX_BOOTSTRAP, MIN_BOOTSTRAP
from core.model.families import handle_support
from core.model.handle import ModelHandle
from core.model.loading import EMBEDDED_NAME, load_model
from core.model.progress import Progress

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
"""The ``--dtype`` choices."""


def parse_device(text: str) -> str:
    """The ``--device`` value: ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        argparse.ArgumentTypeError: any other text (argparse turns it into a usage error).
    """
    device = text.strip().lower()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise argparse.ArgumentTypeError(f"device must be cpu, cuda or cuda:N (e.g. cuda:0), got {text!r}")
    return device


def parse_bootstrap(text: str) -> int:
    """The ``--bootstrap`` value: an integer in the bounds the metrics use
    (:data:`core.maths.metrics.MIN_BOOTSTRAP` … :data:`~core.maths.metrics.MAX_BOOTSTRAP`).

    Raises:
        argparse.ArgumentTypeError: anything else, at parse time (argparse turns it into a usage error).
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not MIN_BOOTSTRAP <= value <= MAX_BOOTSTRAP:
        raise argparse.ArgumentTypeError(f"must be between {MIN_BOOTSTRAP} and {MAX_BOOTSTRAP:,}, got {value}")
    return value


def _not_utf8(value: str) -> int | None:
    """The index of the first character that cannot be UTF-8 (a lone surrogate, e.g. from argv bytes), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_args(args: argparse.Namespace) -> None:
    """Checks every command shares, run before the command itself (no model is loaded yet).

    * text that is not valid UTF-8 (bytes that Python turned into lone surrogates) in any argument;
    * ``--model ""``: an empty name is refused, not read as "the embedded model" (leave ``--model`` out for it);
    * a settings flag out of its bounds (``--window 0``) is refused, not replaced by the default
      (:func:`check_setting_flags`).

    Raises:
        ValueError: the message names the argument.
    """
    for name, value in vars(args).items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, str) and (at := _not_utf8(item)) is not None:
                flag = "--" + name.replace("_", "-") if name not in ("data", "command") else name
                raise ValueError(
                    f"{flag} is not valid UTF-8 text (an undecodable byte at character {at}); "
                    "check the terminal's encoding or the file it came from."
                )
    model = getattr(args, "model", None)
    if model is not None and not model.strip():
        raise ValueError(
            "--model is empty: give a Hugging Face id, a local folder or a GGUF file, or leave it out for the embedded "
            "model."
        )
    check_setting_flags(args)


def check_setting_flags(args: argparse.Namespace) -> None:
    """Check the :class:`DualPathSettings` flags a command has, before anything loads: each against its
    :class:`~core.engine.settings.Setting`, so the message is :meth:`DualPathSettings.validate`'s word for word.

    Raises:
        ValueError: e.g. ``score_window must be between 1 and 4096, got 0`` for ``--window 0``.
    """
    for name, spec in setting_specs().items():
        value = getattr(args, spec.dest, None) if spec.dest else None
        if value is not None:
            spec.check(name, value)


def add_setting_args(p: argparse.ArgumentParser) -> None:
    """One flag per :class:`DualPathSettings` field that has one, generated from its
    :class:`~core.engine.settings.Setting` (flag, type, default, help with unit, bounds and choices).

    Bounds are not argparse's business: :func:`check_args` checks them with the same message as
    :meth:`DualPathSettings.validate`. A command may change a default with ``set_defaults`` (``--help`` shows it).
    """
    defaults = setting_defaults()
    for name, spec in setting_specs().items():
        if spec.flag is None:
            continue
        default = defaults[name]
        known = "default %(default)s" if spec.follows is None else f"default: {spec.follows.replace('_', ' ')}"
        if spec.choices is not None:
            allowed = f"one of {', '.join(spec.choices)}"
        else:
            allowed = f"{spec.low}–{spec.high}" + (f" {spec.unit}" if spec.unit else "")
        p.add_argument(
            spec.flag,
            dest=spec.dest,
            type=type(default),
            default=None if spec.follows is not None else default,
            metavar=spec.dest.upper() if spec.dest else None,
            help=f"{spec.help} ({allowed}; {known})",
        )


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--revision``, ``--device``, ``--dtype``, the :class:`DualPathSettings` flags and
    ``--threshold-file``."""
    p.add_argument(
        "--model",
        default=None,
        help="hub id, local folder, GGUF file (or a folder holding one) or a packaged model's name such as "
        "gemma3-270m (default: the embedded SmolLM2)",
    )
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    p.add_argument(
        "--device", type=parse_device, default=None, help="cpu, cuda or cuda:N (default: CUDA when available)"
    )
    p.add_argument(
        "--dtype", choices=list(DTYPES), default=None, help="weights' dtype (default: float16 on CUDA, float32 on CPU)"
    )
    add_setting_args(p)
    p.add_argument(
        "--threshold-file", default=None, help="JSON file with a calibrated τ (see `calibrate --write-threshold`)"
    )
    p.add_argument(
        "--tau-mode",
        choices=list(TAU_MODES),
        default=DEFAULT_TAU_MODE,
        help="length: τ(L) by answer length with an inconclusive band (default); paper: RePCS' one constant τ",
    )


def settings_from_args(args: argparse.Namespace) -> DualPathSettings:
    """The validated :class:`DualPathSettings` of the flags (a flag left out that ``follows`` another field,
    ``--window``, takes that field's value: ``--max-new-tokens``).

    Raises:
        ValueError: a value out of range (the message names it).
    """
    specs = setting_specs()
    values = {name: getattr(args, spec.dest) for name, spec in specs.items() if spec.dest}
    for name, spec in specs.items():
        if spec.follows is not None and values.get(name) is None:
            values[name] = values[spec.follows]
    settings = DualPathSettings(**values)
    settings.validate()
    return settings


def threshold_from_args(
    args: argparse.Namespace, model_name: str | None = None, handle: ModelHandle | None = None
) -> tuple[Threshold | None, str | None]:
    """The τ of ``--threshold-file`` as ``--tau-mode`` applies it and a sentence saying where it came from, or
    ``(None, None)`` (the engine's default τ); with ``--tau-mode paper`` and no file, the default τ made constant.

    The file is read by :func:`core.engine.threshold.load_threshold`, the loader the app's upload uses (one set
    of checks: τ a positive number of nats, T, α …). Given ``model_name`` (the loaded model's name), a τ of
    another model is refused; :func:`load_handle` makes that check as soon as the model is loaded, so no command
    applies a τ calibrated for another model. Given the loaded ``handle``, the default τ of ``--tau-mode paper`` is
    the τ of its calibration record (:func:`core.engine.calibration_record.record_for`, by identity + template).

    Raises:
        ValueError: the file cannot be read, is not a valid threshold, or belongs to another model.
    """
    mode = getattr(args, "tau_mode", DEFAULT_TAU_MODE)
    if not args.threshold_file:
        if mode == DEFAULT_TAU_MODE:
            return None, None  # the engine applies tau_in_force(the loaded model) in the default setting
        record = None if handle is None else record_for(handle, getattr(args, "template", None) or "auto")
        name = model_name or getattr(args, "model", None) or EMBEDDED_NAME
        return tau_in_force(name, mode=mode, calibration=record)
    if model_name is not None:
        return resolve_tau(model_name, file=args.threshold_file, mode=mode).pair()
    return load_threshold(args.threshold_file).for_mode(mode), f"from {args.threshold_file}"


def load_handle(args: argparse.Namespace) -> ModelHandle:
    """The model of ``--model`` / ``--revision`` on ``--device`` in ``--dtype`` (defaults: the embedded model,
    CUDA when available, float16 on CUDA and float32 on CPU). Every command loads it here.

    A ``--threshold-file`` calibrated for another model is refused here, before anything is scored (the app
    refuses such a τ too).

    Raises:
        core.model.handle.ModelLoadError: the model cannot be loaded (the message says why).
        ValueError: ``--threshold-file`` holds the τ of another model.
    """
    dtype = DTYPES[args.dtype] if args.dtype else None
    handle = load_model(args.model, revision=args.revision, device=args.device, dtype=dtype)
    for line in handle_support(handle).lines():  # what this model's family cannot do, one line each
        sys.stderr.write(f"note: {line}\n")
    if getattr(args, "threshold_file", None):
        load_threshold(args.threshold_file, handle.info.name)
    return handle


def run_from_args(
    args: argparse.Namespace, settings: DualPathSettings, *, record: bool = False
) -> tuple[ModelHandle, DualPathResult]:
    """Load the model and run the dual path once on ``--query`` / ``--context`` (τ from ``--threshold-file``);
    ``record`` keeps the run's internals for the detectors (``run_dual_path(…, record=True)``).

    Raises:
        ValueError: bad input or threshold file; core.model.handle.ModelLoadError: see :func:`load_handle`.
    """
    threshold_from_args(args)  # a bad file fails before the model loads
    handle = load_handle(args)
    threshold, source = threshold_from_args(args, handle.info.name, handle)
    result = run_dual_path(
        handle, args.query, args.context, settings, threshold=threshold, threshold_source=source, record=record
    )
    return handle, result


def write_result(result: DualPathResult, as_json: bool, details: list[str]) -> int:
    """Print ``result`` as one JSON object (with ``calibration``: what its verdicts are calibrated with,
    :func:`core.evaluation.model_card.calibration_status`), or as a text summary (model, both answers, then
    ``details``).

    Returns:
        0, the command's exit status.
    """
    if as_json:
        from core.engine.calibration_record import record_of_result
        from core.evaluation.model_card import calibration_status

        data = result.to_dict()  # the calibration the verdicts come from, next to them (schema_version stays last)
        version = data.pop("schema_version")
        data["calibration"] = calibration_status(record_of_result(result))  # the record that decided it
        data["schema_version"] = version
        sys.stdout.write(json.dumps(data, ensure_ascii=False, allow_nan=False) + "\n")
        return 0
    lines = [
        f"model:       {result.model}",
        f"retrieval:   {result.retrieval.answer}",
        f"parametric:  {result.parametric.answer}",
        *details,
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


@contextmanager
def row_progress(total: int, desc: str = "scoring rows") -> Iterator[Progress]:
    """A progress bar on stderr; yields a :class:`~core.model.progress.Progress` for the scoring functions."""
    with tqdm(total=total, desc=desc, unit="row", file=sys.stderr) as bar:

        def update(done: int, _total: int, _text: str = "") -> None:
            bar.update(done - bar.n)

        yield update
