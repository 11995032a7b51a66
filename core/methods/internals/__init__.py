"""Inside the model: per-layer hidden states, attention reduced on the fly, and the logit lens of both paths.

* :mod:`~core.methods.internals.forward` — the instrumented forward (hidden states at chosen positions,
  attention entropy and segment mass reduced inside the hooks, one head's full pattern on request);
* :mod:`~core.methods.internals.segments` — which tokens are template, context, query or answer;
* :mod:`~core.methods.internals.replay` — a result's prompts rebuilt with the loaded model, its forward
  sequences and CRM's displacement d_ℓ = h_ℓ(context) − h_ℓ(no context) at the last prompt token;
* :mod:`~core.methods.internals.lens` — the logit lens of both paths, KL per layer (CRM appendix F);
* :mod:`~core.methods.internals.attention` — RADAR's attention-specialization features (appendix D.2.1);
* :mod:`~core.methods.internals.analysis` — :func:`analyze`, everything the internals views show for one
  result, as an :class:`Internals`.

Every forward runs through the model handle (:meth:`~core.model.handle.ModelHandle.hooked` /
:meth:`~core.model.handle.ModelHandle.session`): under its lock and ``torch.inference_mode()``, hooks removed
in ``finally``.
"""

from core.methods.internals.analysis import LENS_TOP_K, Internals, PathInternals, analyze
from core.methods.internals.attention import RADAR_TAU, attention_specialization, specialized_heads
from core.methods.internals.forward import ForwardCapture, attention_pattern, instrumented_forward, layer_states
from core.methods.internals.lens import LensComparison, LensPath, logit_lens_compare
from core.methods.internals.replay import displacement, path_sequence, prepared_for
from core.methods.internals.segments import ANSWER, CONTEXT, QUERY, SEGMENTS, TEMPLATE, prompt_segments

__all__ = [
    "ANSWER",
    "CONTEXT",
    "LENS_TOP_K",
    "QUERY",
    "RADAR_TAU",
    "SEGMENTS",
    "TEMPLATE",
    "ForwardCapture",
    "Internals",
    "LensComparison",
    "LensPath",
    "PathInternals",
    "analyze",
    "attention_pattern",
    "attention_specialization",
    "displacement",
    "instrumented_forward",
    "layer_states",
    "logit_lens_compare",
    "path_sequence",
    "prepared_for",
    "prompt_segments",
    "specialized_heads",
]
