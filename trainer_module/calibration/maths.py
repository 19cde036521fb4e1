"""Temperature scaling's numpy maths (Guo et al., ICML 2017): NLL, ECE, the T fits and their
"no worse than the raw softmax" bounds, deterministic (bisections and a fixed grid).
"""
from typing import Optional, Tuple

import numpy as np

MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 100.0
_BISECTION_STEPS = 100
GRID_STEPS = 50  # Candidate temperatures between the NLL-chosen T and T = 1.


# The clean eval images' slice name beside the validation slices': no corruption is named so.
CLEAN_SLICE = "\0clean"


class TemperatureFitError(ValueError):
  """The temperature cannot be fitted: no data, or non-finite logits."""


def log_softmax(logits: np.ndarray) -> np.ndarray:
  shifted = logits - logits.max(axis=1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
  """Mean negative log-likelihood of softmax(logits / temperature), in float64."""
  log_p = log_softmax(np.asarray(logits, np.float64) / temperature)
  return float(-log_p[np.arange(len(labels)), labels].mean())


def ece(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0,
        num_bins: int = 15) -> float:
  """Top-label ECE of softmax(logits / temperature), binned as the trainer's eval bins it."""
  import tensorflow as tf  # Only here: the method registry imports this module without TF.

  from trainer_module import metrics
  # The trainer's metric's own sums, without its accumulating variables: creating those cost
  # ten times the sums, and a fit computes thousands of ECEs.
  sums = metrics.batch_sums(tf.constant(np.asarray(labels, np.int64)),
                            tf.constant(np.asarray(logits, np.float64) / temperature, tf.float32),
                            num_bins)
  return metrics.expected_calibration_error(sums["bin_correct"], sums["bin_confidence"],
                                           float(sums["count"]))


def check_logits(logits: np.ndarray, labels: np.ndarray) -> None:
  if logits.ndim != 2 or len(logits) == 0:
    raise TemperatureFitError(f"No eval examples to fit the temperature on (logits of shape "
                              f"{logits.shape}).")
  if len(labels) != len(logits):
    raise TemperatureFitError(f"{len(logits)} logits but {len(labels)} labels.")
  bad = int(np.sum(~np.isfinite(logits).all(axis=1)))
  if bad:
    raise TemperatureFitError(f"{bad} of {len(logits)} eval examples have non-finite logits; "
                              "the model cannot be calibrated (did training diverge?).")
  if labels.min() < 0 or labels.max() >= logits.shape[1]:
    raise TemperatureFitError(f"Labels must be in [0, {logits.shape[1]}), got "
                              f"[{labels.min()}, {labels.max()}].")


def fit_temperature(logits: np.ndarray, labels: np.ndarray,
                    weights: Optional[np.ndarray] = None) -> float:
  """The T in [MIN_TEMPERATURE, MAX_TEMPERATURE] minimising the (weighted) mean NLL of
  softmax(logits / T)."""
  logits = np.asarray(logits, np.float64)
  labels = np.asarray(labels, np.int64).reshape(-1)
  check_logits(logits, labels)
  weights = np.ones(len(labels)) if weights is None else np.asarray(weights, np.float64)
  true_logit = logits[np.arange(len(labels)), labels]

  def slope(inverse_t: float) -> float:  # d NLL / d(1/T) = E_p[logit] - logit of true class.
    p = np.exp(log_softmax(logits * inverse_t))
    return float(np.average((p * logits).sum(axis=1) - true_logit, weights=weights))

  low, high = np.log(1.0 / MAX_TEMPERATURE), np.log(1.0 / MIN_TEMPERATURE)  # log(1/T).
  if slope(np.exp(low)) >= 0:
    return MAX_TEMPERATURE
  if slope(np.exp(high)) <= 0:  # Every example right with a margin: sharpen as far as allowed.
    return MIN_TEMPERATURE
  for _ in range(_BISECTION_STEPS):
    middle = 0.5 * (low + high)
    if slope(np.exp(middle)) < 0:
      low = middle
    else:
      high = middle
  temperature = float(np.exp(-0.5 * (low + high)))
  if not np.isfinite(temperature):
    raise TemperatureFitError(f"The temperature fit gave {temperature}.")
  return temperature


def no_worse_than_raw(logits: np.ndarray, labels: np.ndarray) -> Tuple[float, float]:
  """The interval of log(1/T) on which the NLL is at most the raw softmax's (log(1/T) = 0).

  The NLL is convex in 1/T, hence unimodal in log(1/T): the interval runs from 0 to the point
  beyond the minimum where the NLL climbs back to its raw value (or to the range's end)."""
  raw = nll(logits, labels)
  best = float(np.log(1.0 / fit_temperature(logits, labels)))
  if best == 0.0:
    return 0.0, 0.0
  inside = np.log(1.0 / MIN_TEMPERATURE) if best > 0 else np.log(1.0 / MAX_TEMPERATURE)
  if nll(logits, labels, float(np.exp(-inside))) > raw:
    inside, outside = best, inside  # The NLL is <= raw at `inside`, > raw at `outside`.
    for _ in range(_BISECTION_STEPS):
      middle = 0.5 * (inside + outside)
      if nll(logits, labels, float(np.exp(-middle))) <= raw:
        inside = middle
      else:
        outside = middle
  return min(0.0, float(inside)), max(0.0, float(inside))


def slice_weights(slices: np.ndarray) -> np.ndarray:
  """Per-example weights under which every slice weighs the same: the weighted mean of a
  per-example term is the mean over the slices of its mean on each."""
  names, index = np.unique(np.asarray(slices), return_inverse=True)
  return 1.0 / (len(names) * np.bincount(index)[index])


def slice_means(logits: np.ndarray, labels: np.ndarray, slices: np.ndarray,
                temperature: float = 1.0, num_bins: int = 15) -> Tuple[float, float]:
  """(NLL, ECE), each the mean over the slices of its value on the slice (cNLL and cECE when
  the slices are corruption x severity)."""
  names = np.unique(slices)
  return (float(np.mean([nll(logits[slices == n], labels[slices == n], temperature)
                         for n in names])),
          float(np.mean([ece(logits[slices == n], labels[slices == n], temperature, num_bins)
                         for n in names])))


def select_temperature_under_shift(clean_logits: np.ndarray, clean_labels: np.ndarray,
                                   shifted_logits: np.ndarray, shifted_labels: np.ndarray,
                                   shifted_slices: np.ndarray, num_bins: int = 15) -> float:
  """The T minimising the clean NLL among the temperatures at which each shifted slice's NLL,
  and the slices' mean ECE, are no worse than the raw softmax's.

  Each slice's NLL bound is an interval of log(1/T) around 0 (`no_worse_than_raw`), so all of
  them together are one (their intersection), and the clean NLL is convex: its restricted
  minimum is the clean fit clipped into that interval. ECE is not convex in T: from that point
  the search walks a fixed grid towards T = 1 (where the bound holds with equality) and stops
  at the first candidate within the ECE bound; the clean NLL only rises along that walk, so the
  first is the best candidate."""
  for logits, labels in ((clean_logits, clean_labels), (shifted_logits, shifted_labels)):
    check_logits(np.asarray(logits), np.asarray(labels).reshape(-1))
  shifted_slices = np.asarray(shifted_slices)
  if len(shifted_slices) != len(shifted_labels):
    raise TemperatureFitError(f"{len(shifted_labels)} shifted examples but "
                              f"{len(shifted_slices)} slice names.")
  bounds = [no_worse_than_raw(shifted_logits[shifted_slices == name],
                              shifted_labels[shifted_slices == name])
            for name in np.unique(shifted_slices)] or [(-np.inf, np.inf)]
  low, high = max(bound[0] for bound in bounds), min(bound[1] for bound in bounds)
  target = float(np.clip(np.log(1.0 / fit_temperature(clean_logits, clean_labels)), low, high))
  raw_ece = slice_means(shifted_logits, shifted_labels, shifted_slices, 1.0, num_bins)[1]
  for step in range(GRID_STEPS, 0, -1):
    candidate = float(np.exp(-target * step / GRID_STEPS))
    if slice_means(shifted_logits / candidate, shifted_labels, shifted_slices, 1.0,
                   num_bins)[1] <= raw_ece:
      return candidate
  return 1.0

