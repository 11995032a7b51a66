"""The model layer: loading, the shared handle, prompts, where a model keeps its parts, hooks, the logit lens.

Everything that knows how a Hugging Face causal LM is laid out lives here; the rest of ``core`` asks this
package (``model_parts(handle)``, ``handle.forward(...)``, ``lens_log_probs(...)``) instead.
"""

from core.model.handle import ModelHandle, ModelInfo, ModelLoadError
from core.model.loading import EMBEDDED_MODEL, EMBEDDED_NAME, handle_from_model, load_model

__all__ = [
    "EMBEDDED_MODEL",
    "EMBEDDED_NAME",
    "ModelHandle",
    "ModelInfo",
    "ModelLoadError",
    "handle_from_model",
    "load_model",
]
