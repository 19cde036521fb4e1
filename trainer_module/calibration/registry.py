"""The temperature_fit methods by name: the one place a method name is looked up.

distance_detail_curve is the default; validation_corruptions serves one T chosen under the
validation shift; clean is the plain clean-data fit (docs/robustness.md, "The three choices")."""
from typing import Dict, Optional

import numpy as np

from trainer_module.calibration import clean, distance_detail_curve, validation_corruptions
from trainer_module.calibration.method import CalibrationMethod

METHODS: Dict[str, CalibrationMethod] = {method.name: method for method in (
    distance_detail_curve.METHOD, validation_corruptions.METHOD, clean.METHOD)}
NAMES = tuple(METHODS)


def get(name: str) -> CalibrationMethod:
  """The method temperature_fit=name chooses; a ValueError naming the flag otherwise."""
  if name not in METHODS:
    raise ValueError(f"Invalid config value temperature_fit={name!r}: must be one of {NAMES}.")
  return METHODS[name]


def recorded(info: Optional[dict]) -> Optional[CalibrationMethod]:
  """The method a calibration record (temperature.json) was fitted with; None without one. A
  record that names no method holds one T for every input, as a clean fit's does; one that names
  a method this code does not serve is refused by name."""
  if not info:
    return None
  name = info.get("temperature_fit", clean.METHOD.name)
  if name not in METHODS:
    raise ValueError(f"The model's calibration record names temperature_fit={name!r}, which "
                     f"this version does not serve (it serves {NAMES}); train or calibrate the "
                     "model again.")
  return METHODS[name]


def served_calibration(info: dict, support, features: np.ndarray,
                       images: Optional[np.ndarray] = None) -> np.ndarray:
  """[batch] the temperatures a model calibrated as `info` records serves inputs of these
  penultimate `features` and transformed `images` with (numpy; the export serves the same in its
  graph)."""
  method = recorded(info)
  return (np.ones(len(features)) if method is None
          else method.temperatures(info, support, features, images))
