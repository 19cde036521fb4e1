"""The temperature map of `temperature_fit=distance_detail_curve` and its fit: T(x) = exp(a +
b z(x) + c s(x)) with b >= 0 over the input's distance score z and detail score s, sharpening
near the data and softening farther out (without detail scores, the curve of z alone: what
bench/calibration.py compares the map with). Why: docs/robustness.md, "Choosing the
temperature".
"""
from typing import NamedTuple, Optional

import numpy as np

from trainer_module.calibration import maths


class DistanceCurve(NamedTuple):
  """The map: log T = log_temperature + slope * distance score + detail_slope * detail score,
  within [MIN_TEMPERATURE, MAX_TEMPERATURE]. slope >= 0: never sharper farther from the data."""
  log_temperature: float  # log T of a typical eval image: its distance and its detail.
  slope: float  # d log T / d distance score.
  detail_slope: float = 0.0  # d log T / d detail score (calibration/detail.py).

  def temperatures(self, scores: np.ndarray, details: Optional[np.ndarray] = None) -> np.ndarray:
    """[batch] T of inputs with these distance scores and, when the map reads them, detail
    scores."""
    log_t = self.log_temperature + self.slope * np.asarray(scores, np.float64)
    if self.detail_slope:
      if details is None:
        raise ValueError("This curve reads the inputs' detail scores; none were given.")
      log_t = log_t + self.detail_slope * np.asarray(details, np.float64)
    return np.clip(np.exp(log_t), maths.MIN_TEMPERATURE, maths.MAX_TEMPERATURE)


def _per_example_nll(logits: np.ndarray, labels: np.ndarray,
                     temperatures: np.ndarray) -> np.ndarray:
  log_p = maths.log_softmax(logits / temperatures[:, np.newaxis])
  return -log_p[np.arange(len(labels)), labels]


def curve_minimising_slice_nll(logits: np.ndarray, labels: np.ndarray, slices: np.ndarray,
                               scores: np.ndarray, details: Optional[np.ndarray] = None,
                               start_log_temperature: float = 0.0) -> DistanceCurve:
  """The curve (with details: the map) minimising the mean over the slices of each slice's NLL,
  slope >= 0; L-BFGS-B from one T, so deterministic."""
  from scipy import optimize
  weights = maths.slice_weights(slices)

  def objective(params):
    curve = DistanceCurve(*params)
    return float(np.sum(weights * _per_example_nll(logits, labels,
                                                   curve.temperatures(scores, details))))

  start = [start_log_temperature, 0.0]
  bounds = [(np.log(maths.MIN_TEMPERATURE), np.log(maths.MAX_TEMPERATURE)), (0.0, None)]
  if details is not None:
    start, bounds = start + [0.0], bounds + [(None, None)]
  return DistanceCurve(*(float(value) for value in optimize.minimize(
      objective, start, method="L-BFGS-B", bounds=bounds).x))


def fit_distance_curve(clean_logits: np.ndarray, clean_labels: np.ndarray,
                       clean_scores: np.ndarray, shifted_logits: np.ndarray,
                       shifted_labels: np.ndarray, shifted_slices: np.ndarray,
                       shifted_scores: np.ndarray, num_bins: int = 15,
                       clean_details: Optional[np.ndarray] = None,
                       shifted_details: Optional[np.ndarray] = None) -> DistanceCurve:
  """The curve minimising the mean, over the clean eval images and each shifted slice, of the
  slice's NLL; then drawn towards the raw softmax until the shifted slices' mean NLL and mean
  ECE are no worse than raw. With the inputs' detail scores it also
  fits detail_slope (either sign). Deterministic: L-BFGS-B from the clean fit, then a fixed
  grid."""
  clean_logits, shifted_logits = (np.asarray(x, np.float64) for x in (clean_logits,
                                                                      shifted_logits))
  clean_labels, shifted_labels = (np.asarray(y, np.int64).reshape(-1)
                                  for y in (clean_labels, shifted_labels))
  for logits, labels in ((clean_logits, clean_labels), (shifted_logits, shifted_labels)):
    maths.check_logits(logits, labels)
  shifted_slices = np.asarray(shifted_slices)
  if not len(shifted_slices) == len(shifted_scores) == len(shifted_labels):
    raise maths.TemperatureFitError(f"{len(shifted_labels)} shifted examples but "
                                    f"{len(shifted_slices)} slice names and "
                                    f"{len(shifted_scores)} distance scores.")
  logits = np.concatenate([clean_logits, shifted_logits])
  labels = np.concatenate([clean_labels, shifted_labels])
  scores = np.concatenate([np.asarray(clean_scores, np.float64),
                           np.asarray(shifted_scores, np.float64)])
  slices = np.concatenate([np.full(len(clean_labels), maths.CLEAN_SLICE),
                           shifted_slices.astype(str)])
  with_details = clean_details is not None
  if with_details != (shifted_details is not None):
    raise ValueError("Give the detail scores of both the clean and the shifted images, or none.")
  details = (np.concatenate([np.asarray(clean_details, np.float64),
                             np.asarray(shifted_details, np.float64)]) if with_details else None)
  if with_details and len(details) != len(labels):
    raise maths.TemperatureFitError(f"{len(details)} detail scores for {len(labels)} examples.")
  fitted = curve_minimising_slice_nll(
      logits, labels, slices, scores, details,
      float(np.log(maths.fit_temperature(clean_logits, clean_labels))))
  raw_nll, raw_ece = maths.slice_means(shifted_logits, shifted_labels, shifted_slices, 1.0,
                                       num_bins)
  for step in range(maths.GRID_STEPS, 0, -1):
    curve = DistanceCurve(*(float(value) * step / maths.GRID_STEPS for value in fitted))
    moved = shifted_logits / curve.temperatures(shifted_scores,
                                                shifted_details)[:, np.newaxis]
    shifted_nll, shifted_ece = maths.slice_means(moved, shifted_labels, shifted_slices, 1.0,
                                                 num_bins)
    if shifted_nll <= raw_nll and shifted_ece <= raw_ece:
      return curve
  return DistanceCurve(0.0, 0.0)
