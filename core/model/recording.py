"""A trace of the generation itself: what :func:`core.model.trace.trace` keeps of a sequence, read while
``generate`` produces it, so that no second forward pass over the same tokens is needed.

Greedy generation runs the model over the prompt (the prefill) and then over each generated token with the
key/value cache (the decode steps). Together these forwards compute, for one batch row, exactly what a
teacher-forced pass over ``prompt + answer[:-1]`` computes — every position's residual stream and MLP
input/output, and the attention weights of every query over its keys — up to the float32 rounding of
matrix products of another shape (a batch of rows, one query at a time). :func:`recording` hooks the model
for a block of calls (the engine wraps its ``generate`` in it) and keeps, for the rows it is asked to record:

* the residual stream (:func:`core.model.hooks.residual_hooks` numbering) and each layer's MLP output at every
  position fed (not the MLP's input, which no reader of a recording needs: its :meth:`~Recording.trace` leaves
  ``mlp_in`` empty);
* the attention weights of the queries from the prompt's last token on (the rows that produce the answer's
  tokens: the prefill's last row, then each decode step's one row) — the earlier rows of the prefill are not
  kept, so the cost stays ``layers × heads × answer × T`` instead of ``× T × T``.

:meth:`Recording.trace` turns it into the :class:`~core.model.trace.Trace` that ``trace(handle, [ids], …)``
returns for a prefix ``ids`` of the fed tokens, running the caller's attention reducers on the kept rows (the
rows that were not kept are NaN, so a reducer that reads them shows it). The hooks never raise into
``generate``: a row whose recording fails (a layout the hooks do not know, no attention weights) says why in
:attr:`Recording.failed` and its :meth:`~Recording.trace` raises ``ValueError``, so the caller runs its own pass.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from core.model.handle import ModelHandle
from core.model.hooks import attention_hooks, input_hook, module_io_hooks, residual_hooks
from core.model.memory import fix_mmap_threshold
from core.model.parts import layer_mlps, model_parts
from core.model.trace import ALL, AttentionReducer, Trace, check_positions


@dataclass
class Recording:
    """One batch row, read while the model was generating it (see the module docstring).

    Attributes:
        prompt_len: the row's prompt tokens (its padding excluded).
        fed: the tokens fed so far (the prompt, then one generated token per decode step); set by the caller
            (:meth:`set_fed`), which knows the generated ids.
        failed: why the recording is unusable, or ``None``.
    """

    prompt_len: int
    fed: list[int] = field(default_factory=list)
    failed: str | None = None
    _states: list[list[torch.Tensor]] = field(default_factory=list, repr=False)
    _mlp: dict[str, list[list[torch.Tensor]]] = field(default_factory=dict, repr=False)
    _weights: list[list[torch.Tensor]] = field(default_factory=list, repr=False)

    @property
    def n_fed(self) -> int:
        """Positions recorded (the prefill's plus one per decode step)."""
        return sum(int(p.shape[0]) for p in self._states[0]) if self._states and self._states[0] else 0

    def set_fed(self, prompt: Sequence[int], generated: Sequence[int]) -> None:
        """The tokens this row was fed: ``prompt`` then the generated tokens of the decode steps recorded."""
        self.fed = [int(i) for i in prompt] + [int(i) for i in generated][: max(0, self.n_fed - len(prompt))]

    def trace(
        self,
        ids: Sequence[int],
        *,
        positions: Sequence[int] | str | None = None,
        residual: bool = True,
        mlp: bool = False,
        attention: Mapping[str, AttentionReducer] | None = None,
    ) -> Trace:
        """What ``trace(handle, [ids], positions=…, residual=…, mlp=…, attention=…)`` returns, from the recording.

        Raises:
            ValueError: a failed recording, ``ids`` that are not a prefix of the fed tokens (or shorter than the
                prompt), MLP or attention asked where the recording has none, or bad positions.
        """
        if self.failed is not None:
            raise ValueError(f"the generation's recording is unusable: {self.failed}")
        n = len(ids)
        if n < self.prompt_len or list(ids) != self.fed[:n] or n > self.n_fed:
            raise ValueError("these tokens are not a prefix of the recorded generation")
        keep = list(range(n)) if positions == ALL else check_positions([-1] if positions is None else positions, n)  # type: ignore[arg-type]
        index = torch.tensor(keep, dtype=torch.long)
        out = Trace(lengths=[n], positions=[keep])
        if residual:
            out.residual = [torch.stack([_joined(p)[:n][index] for p in self._states])]
        if mlp:
            if not self._mlp:
                raise ValueError("the generation was recorded without the MLPs")
            out.mlp_out = [torch.stack([_joined(p)[:n][index] for p in self._mlp["out"]])]
        if attention:
            if not self._weights:
                raise ValueError("the generation was recorded without attention weights")
            out.attention = {name: [[None] * len(self._weights)] for name in attention}
            for layer, pieces in enumerate(self._weights):
                w = self._square(pieces, n)
                for name, reduce in attention.items():
                    out.attention[name][0][layer] = reduce(layer, w)
        return out

    def _square(self, pieces: list[torch.Tensor], n: int) -> torch.Tensor:
        """One layer's ``(H, n, n)`` weights: the kept rows (queries ``prompt_len − 1`` on), NaN above them."""
        first = self.prompt_len - 1
        heads = int(pieces[0].shape[0])
        w = torch.full((heads, n, n), float("nan"), dtype=torch.float32, device=pieces[0].device)
        row = first
        for piece in pieces:  # (H, q, k): queries row … row + q − 1 over keys 0 … k − 1
            for q in range(piece.shape[1]):
                if row >= n:
                    return w
                k = min(int(piece.shape[2]), n)
                w[:, row, :k] = piece[:, q, :k]
                w[:, row, k:] = 0.0
                row += 1
        return w


def _joined(pieces: list[torch.Tensor]) -> torch.Tensor:
    """One layer's pieces along the positions, on the host (the decode steps' pieces may still be on the device)."""
    return torch.cat([p.cpu() for p in pieces])


class _Recorder:
    """The hooks' side of :func:`recording`: appends each forward's pieces of the recorded rows."""

    def __init__(
        self,
        rows: Sequence[int],
        pads: Sequence[int],
        recordings: list[Recording],
        n_layers: int,
        stop_ids: Collection[int] = (),
    ) -> None:
        self.rows, self.pads, self.recordings = list(rows), list(pads), recordings
        self.stop_ids = {int(i) for i in stop_ids}
        self.done = [False] * len(recordings)
        self.first_call: dict[tuple[str, int], bool] = {}
        self.steps: dict[int, int] = {}  # forwards seen per attention layer
        self.width = 0  # the prefill's keys (padding included)
        for rec in recordings:
            rec._states = [[] for _ in range(n_layers + 1)]
            rec._mlp = {"out": [[] for _ in range(n_layers)]}
            rec._weights = [[] for _ in range(n_layers)]

    def _pieces(self, key: tuple[str, int], h: torch.Tensor) -> Iterator[tuple[Recording, torch.Tensor]]:
        prefill = self.first_call.setdefault(key, True)
        self.first_call[key] = False
        if not prefill and int(h.shape[1]) != 1:  # a generation without the key/value cache re-reads everything
            raise ValueError(f"a decode step fed {int(h.shape[1])} positions, not one (no key/value cache)")
        for rec, row, pad, done in zip(self.recordings, self.rows, self.pads, self.done, strict=True):
            if rec.failed is None and not done:  # the prefill's pieces go to the host now (large), a step's later
                yield (
                    rec,
                    (
                        h[row, pad:].to("cpu", torch.float32, copy=True)
                        if prefill
                        else h[row].to(torch.float32, copy=True)
                    ),
                )

    def on_ids(self, ids: torch.Tensor) -> None:
        """Before each forward: a row fed one of ``stop_ids`` has finished its answer; it is no longer recorded."""
        if self.stop_ids and self.first_call.get(("state", 0)) is False:
            self._safely(lambda: self._stop(ids))

    def _stop(self, ids: torch.Tensor) -> None:
        for i, row in enumerate(self.rows):
            self.done[i] = self.done[i] or int(ids[row, -1]) in self.stop_ids

    def on_state(self, index: int, h: torch.Tensor) -> None:
        self._safely(lambda: [rec._states[index].append(p) for rec, p in self._pieces(("state", index), h)])

    def on_mlp(self, kind: str, layer: int, h: torch.Tensor) -> None:
        self._safely(lambda: [rec._mlp[kind][layer].append(p) for rec, p in self._pieces((kind, layer), h)])

    def on_weights(self, layer: int, w: torch.Tensor) -> None:  # (B, H, q, k)
        def keep() -> None:
            step = self.steps.get(layer, 0)
            self.steps[layer] = step + 1
            if step == 0:
                self.width = int(w.shape[-1])
            elif int(w.shape[-1]) != self.width + step:  # a sliding window: the cache keeps the last keys only
                raise ValueError(
                    f"layer {layer} attends over {int(w.shape[-1])} cached keys at decode step {step}, not all "
                    f"{self.width + step} (a sliding-window cache): its columns are not positions"
                )
            for rec, row, pad, done in zip(self.recordings, self.rows, self.pads, self.done, strict=True):
                if rec.failed is None and not done:
                    piece = w[row, :, -1:, pad:] if step == 0 else w[row, :, :, pad:]
                    rec._weights[layer].append(piece.to(torch.float32, copy=True))

        self._safely(keep)

    def _safely(self, fn) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a recording must never break the generation it reads
            for rec in self.recordings:
                rec.failed = rec.failed or f"{type(exc).__name__}: {exc}"

    def check(self) -> None:
        """Mark rows whose recording is incomplete (a layer the hooks never saw, no attention weights); drop MLP
        pieces some layer lacks (the trace then refuses ``mlp=True``)."""
        for rec in self.recordings:
            if rec._mlp and any(not p for pieces in rec._mlp.values() for p in pieces):
                rec._mlp = {}
            if rec.failed is None and any(not p for p in rec._states):
                rec.failed = "the forward pass did not reach every decoder layer"
            elif rec.failed is None and any(not p for p in rec._weights):
                rec.failed = "the model returned no attention weights (load it with attn_implementation='eager')"
            if rec.failed is not None:
                rec._states, rec._mlp, rec._weights = [], {}, []


def recording_bytes(handle: ModelHandle, prompt_len: int, new_tokens: int) -> int:
    """About how many bytes one row's recording holds: the residual stream and the MLP outputs at every position
    fed (float32) and each layer's attention rows of the answer's queries."""
    info = handle.info
    positions = int(prompt_len) + int(new_tokens)
    states = (2 * info.n_layers + 1) * positions * info.hidden_size
    weights = info.n_layers * info.n_heads * (int(new_tokens) + 1) * positions
    return 4 * (states + weights)


@contextmanager
def recording(
    handle: ModelHandle,
    rows: Sequence[int],
    pads: Sequence[int],
    prompt_lens: Sequence[int],
    *,
    mlp: bool = True,
    stop_ids: Collection[int] = (),
) -> Iterator[list[Recording]]:
    """Record batch ``rows`` (left-padded by ``pads``) of every forward run inside the block, holding the model
    (:meth:`ModelHandle.hooked`: every hook is removed in ``finally``). The first recording fixes glibc's mmap
    threshold for the process (:func:`core.model.memory.fix_mmap_threshold`: without it a recorded batch's peak
    memory grows by about one key/value cache per decode step).

    Args:
        rows: the batch rows to record.
        pads: each recorded row's left padding in the first forward (the prefill).
        prompt_lens: each recorded row's prompt length (without padding).
        mlp: also keep each layer's MLP output.
        stop_ids: tokens that end an answer (EOS): a row stops being recorded once it is fed one (the rest of the
            batch may go on generating), so it keeps ``prompt + answer[:-1]`` and no more.

    Yields:
        One :class:`Recording` per row, filled as the block runs; the caller sets :meth:`Recording.set_fed`.
    """
    parts = model_parts(handle)
    fix_mmap_threshold()  # the many small pieces kept here would otherwise pin the freed cache blocks (see it)
    recordings = [Recording(prompt_len=int(n)) for n in prompt_lens]
    recorder = _Recorder(rows, pads, recordings, parts.n_layers, stop_ids)
    try:
        mlps = layer_mlps(parts) if mlp else ()
    except ValueError:
        mlps = ()
    registrations = [
        input_hook(handle.model.get_input_embeddings(), recorder.on_ids),
        *residual_hooks(parts, recorder.on_state),
        *module_io_hooks(mlps, recorder.on_mlp, inputs=False),
        *attention_hooks(parts, recorder.on_weights, require=False),
    ]
    with handle.hooked(registrations):
        yield recordings
    recorder.check()
