"""Post-hoc temperature scaling (Guo et al., ICML 2017): one scalar T, fitted on the eval split.

The served probabilities become softmax(logits / T): the predicted class is unchanged, the
confidence is not over- (T > 1) or under-stated (T < 1). T minimises the eval NLL. The NLL is
convex in 1/T, so its derivative in 1/T is increasing and a bisection finds the minimum
deterministically (no learning rate, no random start). The test split is never used.
"""
import json
import logging
import os
from typing import Tuple

import numpy as np
import tensorflow as tf

log = logging.getLogger(__name__)

MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 100.0
CALIBRATION_INFO_PATH = os.path.join("assets.extra", "temperature.json")
_BISECTION_STEPS = 100


class TemperatureFitError(ValueError):
  """The temperature cannot be fitted: no data, or non-finite logits."""


def _log_softmax(logits: np.ndarray) -> np.ndarray:
  shifted = logits - logits.max(axis=1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
  """Mean negative log-likelihood of softmax(logits / temperature), in float64."""
  log_p = _log_softmax(np.asarray(logits, np.float64) / temperature)
  return float(-log_p[np.arange(len(labels)), labels].mean())


def _check(logits: np.ndarray, labels: np.ndarray) -> None:
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


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
  """The T in [MIN_TEMPERATURE, MAX_TEMPERATURE] minimising the NLL of softmax(logits / T)."""
  logits = np.asarray(logits, np.float64)
  labels = np.asarray(labels, np.int64).reshape(-1)
  _check(logits, labels)
  true_logit = logits[np.arange(len(labels)), labels]

  def slope(inverse_t: float) -> float:  # d NLL / d(1/T) = E_p[logit] - logit of true class.
    p = np.exp(_log_softmax(logits * inverse_t))
    return float(np.mean((p * logits).sum(axis=1) - true_logit))

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


def model_logits(model, batches: tf.data.Dataset) -> Tuple[np.ndarray, np.ndarray]:
  """The model's float logits and the labels over (images, labels) batches, or (images, labels,
  weights) batches whose weight-0 rows are padding and are left out."""
  logits, labels = [], []
  for batch in batches:
    images, batch_labels = batch[0], batch[1].numpy().reshape(-1)
    batch_logits = model(images, training=False).numpy().astype(np.float32)
    if len(batch) > 2:
      keep = batch[2].numpy().reshape(-1) > 0
      batch_logits, batch_labels = batch_logits[keep], batch_labels[keep]
    logits.append(batch_logits)
    labels.append(batch_labels)
  if not logits or not sum(len(l) for l in labels):
    raise TemperatureFitError("The eval split is empty; there is nothing to fit the "
                              "temperature on.")
  return np.concatenate(logits), np.concatenate(labels)


def calibrate(model, eval_batches: tf.data.Dataset) -> dict:
  """Fits T on the eval split; returns it with the eval NLL before and after, for the record."""
  logits, labels = model_logits(model, eval_batches)
  temperature = fit_temperature(logits, labels)
  info = {"temperature": temperature, "eval_examples": int(len(labels)),
          "eval_nll_before": nll(logits, labels), "eval_nll_after": nll(logits, labels,
                                                                        temperature)}
  log.info("Temperature scaling on %d eval examples: T = %.4f, eval NLL %.4f -> %.4f.",
           info["eval_examples"], temperature, info["eval_nll_before"], info["eval_nll_after"])
  return info


def write_calibration_info(export_dir: str, info: dict) -> None:
  """Records T beside the SavedModel (assets.extra is copied with it, ignored by serving)."""
  path = os.path.join(export_dir, CALIBRATION_INFO_PATH)
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "w") as f:
    json.dump(info, f, indent=2)


def read_calibration_info(model_dir: str) -> dict:
  with tf.io.gfile.GFile(os.path.join(model_dir, CALIBRATION_INFO_PATH)) as f:
    return json.load(f)
