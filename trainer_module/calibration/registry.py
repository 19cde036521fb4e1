"""The temperature_fit methods by name: the one place a method name is looked up."""
from typing import Dict, Optional

import numpy as np

from trainer_module.calibration import (clean, clean_and_augmix, distance_curve,
                                        distance_detail_curve, in_support,
                                        validation_corruptions)
from trainer_module.calibration.method import CalibrationMethod

METHODS: Dict[str, CalibrationMethod] = {method.name: method for method in (
    validation_corruptions.METHOD, clean.METHOD, clean_and_augmix.METHOD, in_support.METHOD,
    distance_curve.METHOD, distance_detail_curve.METHOD)}
NAMES = tuple(METHODS)
ENSEMBLE_NAMES = tuple(name for name, method in METHODS.items() if method.for_ensembles)


def get(name: str) -> CalibrationMethod:
  """The method temperature_fit=name chooses; a ValueError naming the flag otherwise."""
  if name not in METHODS:
    raise ValueError(f"Invalid config value temperature_fit={name!r}: must be one of {NAMES}.")
  return METHODS[name]


def recorded(info: Optional[dict]) -> Optional[CalibrationMethod]:
  """The method a calibration record (temperature.json) was fitted with; None without one. A
  record that names no method holds one T for every input, as a clean fit's does."""
  return get(info.get("temperature_fit", clean.METHOD.name)) if info else None


def served_calibration(info: dict, support, features: np.ndarray,
                       images: Optional[np.ndarray] = None) -> np.ndarray:
  """[batch] the temperatures a model calibrated as `info` records serves inputs of these
  penultimate `features` and transformed `images` with (numpy; the export serves the same in its
  graph)."""
  method = recorded(info)
  return (np.ones(len(features)) if method is None
          else method.temperatures(info, support, features, images))
