"""Detectors: one registry (:mod:`core.detectors.registry`) and one module per family; each detector is one
declaration (:class:`Detector`) carrying everything the project asks of it (docs/detectors.md).

Import from here: ``from core.detectors import available, get, register, resolve, Detector, DetectorInput``.
"""

from core.detectors.registry import (
    CONTEXT_FAMILIARITY,
    CONTEXT_RELIANCE,
    CONTEXT_TEXT,
    GROUNDED_HIGH,
    GROUPS,
    MEMORIZED_HIGH,
    PARAMETRIC_KNOWLEDGE,
    PROMPT_STATES,
    QUERY_TEXT,
    RECALL_VS_REASONING,
    RETRIEVAL_TRACE,
    SOURCE_ATTRIBUTION,
    Details,
    Detector,
    DetectorInput,
    DetectorThreshold,
    available,
    declare,
    get,
    register,
    register_family,
    resolve,
    unregister,
)

__all__ = [
    "CONTEXT_FAMILIARITY",
    "CONTEXT_RELIANCE",
    "CONTEXT_TEXT",
    "GROUNDED_HIGH",
    "GROUPS",
    "MEMORIZED_HIGH",
    "PARAMETRIC_KNOWLEDGE",
    "PROMPT_STATES",
    "QUERY_TEXT",
    "RECALL_VS_REASONING",
    "RETRIEVAL_TRACE",
    "SOURCE_ATTRIBUTION",
    "Details",
    "Detector",
    "DetectorInput",
    "DetectorThreshold",
    "available",
    "declare",
    "get",
    "register",
    "register_family",
    "resolve",
    "unregister",
]
