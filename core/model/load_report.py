"""The one check of transformers' load report: a model any of whose weights was not read from its files is refused.

``from_pretrained(..., output_loading_info=True)`` says which of the model's weights the checkpoint did not hold
(``missing_keys``: transformers leaves them at a random initialization and only prints a table), which tensors of
the checkpoint the model has no place for (``unexpected_keys``: a renamed or foreign tensor), which had another
shape than the config asks for (``mismatched_keys``) and any other error. A model loaded that way computes with
random weights while looking like the real one, so every load of this tool (a GGUF file's conversion, the
converted copy, a folder, a hub id) passes its report through :func:`check_loading_info`, which refuses it naming
the tensors. Weights the model ties to another one (an unembedding tied to the embedding) are not missing:
transformers already leaves them out of the report.

A GGUF file's conversion keeps the verdict: :func:`install_conversion` puts a converted folder in place only after
the check passed, its ``gguf.json`` saying :data:`COMPLETE_KEY`, and :func:`complete_conversion` is the one test of
whether a cached folder may be used (one written without the mark is converted again, never used as it is).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from core.model.handle import ModelLoadError

logger = logging.getLogger(__name__)

SHOWN = 6
"""At most this many tensor names are listed per kind; the message gives the count of the rest."""


def _names(keys: Iterable[Any], label: Callable[[str], str]) -> tuple[int, str]:
    names = sorted(str(k[0] if isinstance(k, tuple) else k) for k in keys)
    shown = ", ".join(label(n) for n in names[:SHOWN])
    return len(names), shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def gguf_namer(architecture: str, n_layers: int) -> Callable[[str], str]:
    """``name → "name (blk.0.attn_k.weight in the GGUF file)"``: a transformers weight name with the tensor name
    llama.cpp gives it (``gguf``'s own name map), so the message names what is missing from the file; the name
    alone where the map has none."""
    try:
        import gguf

        arch = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[architecture]
        table = gguf.get_tensor_name_map(arch, n_layers)
    except Exception:  # noqa: BLE001 - an architecture gguf does not map: the transformers name alone
        return str

    def label(name: str) -> str:
        theirs = table.get_name(name, try_suffixes=(".weight", ".bias"))
        return f"{name} ({theirs} in the GGUF file)" if theirs else name

    return label


def check_loading_info(
    info: dict[str, Any], what: str, *, label: Callable[[str], str] = str, advice: str | None = None
) -> None:
    """Refuse a model whose load report says a weight was not read from its files.

    Args:
        info: the dict ``from_pretrained(..., output_loading_info=True)`` returns (``missing_keys``,
            ``unexpected_keys``, ``mismatched_keys``, ``error_msgs``).
        what: the model as the user named it (a file, a folder, a hub id).
        label: how a missing weight is named (:func:`gguf_namer` adds the GGUF tensor's name).
        advice: the last sentence (default: get the files again).

    Raises:
        ModelLoadError: the message names the tensors and says the model was not loaded.
    """
    problems = []
    missing = info.get("missing_keys") or ()
    if missing:
        n, shown = _names(missing, label)
        problems.append(f"{n} weight(s) of the model are not in it and would be left at random values: {shown}")
    unexpected = info.get("unexpected_keys") or ()
    if unexpected:
        n, shown = _names(unexpected, str)
        problems.append(f"{n} tensor(s) in it are not weights of this model (renamed or foreign): {shown}")
    mismatched = info.get("mismatched_keys") or ()
    if mismatched:
        shapes = [f"{k[0]} (file {tuple(k[1])}, model {tuple(k[2])})" for k in sorted(mismatched, key=str)[:SHOWN]]
        more = f" and {len(mismatched) - SHOWN} more" if len(mismatched) > SHOWN else ""
        listed = ", ".join(shapes) + more
        problems.append(f"{len(mismatched)} weight(s) have another shape than the model's config: {listed}")
    errors = [str(e) for e in info.get("error_msgs") or ()]
    if errors:
        problems.append("errors while reading the weights: " + "; ".join(errors[:3]))
    if problems:
        advice = advice or "The files are damaged or incomplete: download or convert the model again."
        raise ModelLoadError(f"{what} cannot be used: " + "; ".join(problems) + f". It was not loaded. {advice}")


# ---------------------------------------------------------------------------------------------------------
# the verdict kept with a conversion


COMPLETE_KEY = "weights_complete"
"""The key of ``gguf.json`` that says a converted folder passed :func:`check_loading_info`
(every weight read from the file) and its chat-template check: a folder without it (written before the check
existed, possibly with random weights for a tensor the file lacked) is never used; it is converted again."""


def complete_conversion(target: Path) -> bool:
    """A complete conversion: the weights, the config and a ``gguf.json`` saying :data:`COMPLETE_KEY`."""
    if not ((target / "model.safetensors").is_file() and (target / "config.json").is_file()):
        return False
    try:
        marker = json.loads((target / "gguf.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get(COMPLETE_KEY) is True


def install_conversion(tmp: Path, target: Path) -> None:
    """Rename a finished conversion into place; an earlier folder that is not a complete conversion (see
    :func:`complete_conversion`) is moved aside and removed first. Another process that installed a complete copy first
    wins (the same bytes)."""
    if target.exists() and not complete_conversion(target):
        stale = target.with_name(f".stale-{target.name}-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.replace(target, stale)
        except OSError:  # another process moved it first
            pass
        else:
            logger.warning("removed %s: an unchecked conversion (from an earlier version), converted again", target)
            if stale.is_symlink():
                stale.unlink()
            else:
                shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        if not complete_conversion(target):
            raise
