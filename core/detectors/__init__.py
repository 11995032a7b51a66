"""Detectors: one registry (:mod:`core.detectors.registry`) and one module per family.

Import from here: ``from core.detectors import available, get, resolve, Detector, DetectorInput``.
"""

from core.detectors.registry import (
    GROUNDED_HIGH,
    MEMORIZED_HIGH,
    Detector,
    DetectorInput,
    available,
    get,
    register,
    register_family,
    resolve,
)

__all__ = [
    "GROUNDED_HIGH",
    "MEMORIZED_HIGH",
    "Detector",
    "DetectorInput",
    "available",
    "get",
    "register",
    "register_family",
    "resolve",
]
