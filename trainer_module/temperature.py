"""Post-hoc temperature scaling (Guo et al., ICML 2017) that stays honest under shift.

The served probabilities are softmax(logits / T): the predicted class is unchanged, only the
confidence moves. A T fitted on clean eval data alone (`temperature_fit=clean`) often sharpens
(T < 1) a model that is under-confident on clean images but over-confident on shifted ones, and
so makes the corrupted set worse. Two fits also look at shifted copies of the eval images:
- `validation_corruptions` (the default): the eval images under Hendrycks & Dietterich's four
  validation corruptions (speckle noise, gaussian blur, spatter, saturate, at severities 1-5),
  which their benchmark sets apart from the 15 test corruptions for tuning under shift. T
  minimises the clean NLL among the temperatures at which the NLL of every validation
  corruption x severity slice, and the slices' mean ECE, are no worse than the raw softmax's
  (T = 1): clean calibration improves as far as it can without costing calibration under any
  kind or strength of shift. Per slice, not on average: a mild slice that welcomes sharpening
  must not outvote a strong one that it hurts, since the mix of strengths met in use is
  unknown (on the digits the 20 slices together are milder than the 75 evaluated ones).
- `in_support`: the same rule, for a map richer than one T: T applies to inputs that lie no
  farther from the training data than the eval images it is fitted on, the raw softmax to the
  others. "Farther" is the Mahalanobis distance of the penultimate features to the nearest
  training class mean under the classes' shared covariance (Lee et al., NeurIPS 2018); the
  radius is the largest distance of an eval image. A clean fit that sharpens then reaches the
  inputs it was fitted for, while the far-off shifted inputs on which sharpening hurts keep the
  raw softmax; validation-shift examples inside the radius still bound T as above. The served
  model computes the distance of each input (export.py). An ensemble's support is the union of
  its members': an input is inside when some member's features lie within that member's radius
  (ensemble.py says why).
- `distance_curve`: a temperature per input, T(x) = exp(a + b z(x)) with b >= 0, where z(x) is
  how far the input lies from the training data: its log Mahalanobis distance (as in_support
  measures it) in standard deviations of the clean eval images' log distances above their mean.
  Near the data T sharpens an under-confident model as the clean fit does; farther out it
  softens, continuously, as far as the input lies (the raw softmax of a network is
  over-confident far from its data, Hein et al. 2019). (a, b) minimise the mean over the clean
  eval images and each validation corruption x severity slice of the slice's NLL, and the curve
  is then drawn towards the raw softmax (a, b) -> s (a, b), s from 1 down to 0 on a grid,
  until the validation slices' mean NLL and mean ECE are no worse than the raw softmax's.
  Measured on the digits before it was chosen (docs/robustness.md): the distance of the
  penultimate features orders the corrupted images by accuracy (99% in the nearest tenth, 17%
  in the farthest) and severe noise lies farthest of all; distances in earlier layers, the
  logits' entropy or margin, a kNN distance and the relative Mahalanobis distance each did no
  better when held out one validation corruption at a time. An ensemble's z is its nearest
  member's (each member's own feature space and eval statistics).
- `clean_and_augmix`: the eval images under the training-time AugMix augmentation. T minimises
  the mean of the two sets' NLLs, restricted to the temperatures at which neither set's NLL is
  above the raw softmax's. A model trained with AugMix is under-confident on AugMix views too,
  so this proxy rarely stops a clean fit that sharpens.
Each NLL is convex in 1/T, so each "no worse than raw" restriction is an interval around
1/T = 1, and a restricted minimum of a convex objective is its unrestricted one clipped into the
intersection. Bisections and a fixed grid make every step deterministic. The test split is never
used, nor any of the 15 benchmark corruptions.
"""
import hashlib
import io
import json
import logging
import os
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from trainer_module import reference_corruptions

log = logging.getLogger(__name__)

MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 100.0
CALIBRATION_INFO_PATH = os.path.join("assets.extra", "temperature.json")
# Set apart for validation by Hendrycks & Dietterich (hendrycks/robustness,
# ImageNet-C/imagenet_c/README.md: "the last four are validation functions"); tfds ships them as
# cifar10_corrupted's 4 extra corruptions. Disjoint from the 15 the gate and report evaluate.
VALIDATION_CORRUPTIONS = reference_corruptions.EXTRA_CORRUPTIONS
_BISECTION_STEPS = 100
_ECE_GRID_STEPS = 50  # Candidate temperatures between the NLL-chosen T and T = 1.
_MIN_DISTANCE = 1e-12  # Keeps the log of a distance finite (an input on a class mean).


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
  from trainer_module.metrics import ClassificationMetrics
  metrics = ClassificationMetrics(num_bins)
  metrics.update(tf.constant(np.asarray(labels, np.int64)),
                 tf.constant(np.asarray(logits, np.float64) / temperature, tf.float32))
  return metrics.result()["ece"]


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


def fit_temperature(logits: np.ndarray, labels: np.ndarray,
                    weights: Optional[np.ndarray] = None) -> float:
  """The T in [MIN_TEMPERATURE, MAX_TEMPERATURE] minimising the (weighted) mean NLL of
  softmax(logits / T)."""
  logits = np.asarray(logits, np.float64)
  labels = np.asarray(labels, np.int64).reshape(-1)
  _check(logits, labels)
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


def _no_worse_than_raw(logits: np.ndarray, labels: np.ndarray) -> Tuple[float, float]:
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


def select_temperature(clean_logits: np.ndarray, clean_labels: np.ndarray,
                       shifted_logits: np.ndarray, shifted_labels: np.ndarray) -> float:
  """The T minimising the mean of the clean and the shifted NLL, among the temperatures at which
  neither is above the raw softmax's (see the module docstring)."""
  for logits, labels in ((clean_logits, clean_labels), (shifted_logits, shifted_labels)):
    _check(np.asarray(logits), np.asarray(labels).reshape(-1))
  weights = np.concatenate([np.full(len(clean_labels), 1.0 / len(clean_labels)),
                            np.full(len(shifted_labels), 1.0 / len(shifted_labels))])
  pooled = fit_temperature(np.concatenate([clean_logits, shifted_logits]),
                           np.concatenate([clean_labels, shifted_labels]), weights)
  clean_low, clean_high = _no_worse_than_raw(clean_logits, clean_labels)
  shifted_low, shifted_high = _no_worse_than_raw(shifted_logits, shifted_labels)
  low, high = max(clean_low, shifted_low), min(clean_high, shifted_high)  # Both hold 0.
  return float(np.exp(-np.clip(np.log(1.0 / pooled), low, high)))


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
                                  shifted_slices: np.ndarray, num_bins: int = 15,
                                  shifted_applies: Optional[np.ndarray] = None) -> float:
  """The T minimising the clean NLL among the temperatures at which each shifted slice's NLL,
  and the slices' mean ECE, are no worse than the raw softmax's.

  shifted_applies: which shifted examples T applies to (all by default); the others keep the
  raw softmax (`in_support`). Each slice's NLL is then its scaled examples' NLL plus a constant,
  still convex in 1/T.
  Each slice's NLL bound is an interval of log(1/T) around 0 (`_no_worse_than_raw`), so all of
  them together are one (their intersection), and the clean NLL is convex: its restricted
  minimum is the clean fit clipped into that interval. ECE is not convex in T: from that point
  the search walks a fixed grid towards T = 1 (where the bound holds with equality) and stops
  at the first candidate within the ECE bound; the clean NLL only rises along that walk, so the
  first is the best candidate."""
  for logits, labels in ((clean_logits, clean_labels), (shifted_logits, shifted_labels)):
    _check(np.asarray(logits), np.asarray(labels).reshape(-1))
  shifted_slices = np.asarray(shifted_slices)
  if len(shifted_slices) != len(shifted_labels):
    raise TemperatureFitError(f"{len(shifted_labels)} shifted examples but "
                              f"{len(shifted_slices)} slice names.")
  applies = (np.ones(len(shifted_labels), bool) if shifted_applies is None
             else np.asarray(shifted_applies, bool))
  bounds = [_no_worse_than_raw(shifted_logits[(shifted_slices == name) & applies],
                               shifted_labels[(shifted_slices == name) & applies])
            for name in np.unique(shifted_slices[applies])] or [(-np.inf, np.inf)]
  low, high = max(bound[0] for bound in bounds), min(bound[1] for bound in bounds)
  target = float(np.clip(np.log(1.0 / fit_temperature(clean_logits, clean_labels)), low, high))
  raw_ece = slice_means(shifted_logits, shifted_labels, shifted_slices, 1.0, num_bins)[1]
  for step in range(_ECE_GRID_STEPS, 0, -1):
    candidate = float(np.exp(-target * step / _ECE_GRID_STEPS))
    if slice_means(_per_example(shifted_logits, candidate, applies), shifted_labels,
                   shifted_slices, 1.0, num_bins)[1] <= raw_ece:
      return candidate
  return 1.0


class FeatureSupport(NamedTuple):
  """Where the eval images lie in the network's penultimate feature space: the training
  classes' feature means, the inverse of their shared covariance, and the largest Mahalanobis
  distance of an eval image to its nearest class mean (Lee et al., NeurIPS 2018). `start`: the
  first of the features' columns it reads (an ensemble member's block among the members'
  features side by side); it reads as many as the means have."""
  class_means: np.ndarray  # [classes, features]
  precision: np.ndarray  # [features, features]
  radius: float
  start: int = 0
  # The eval images' log distances: their mean and standard deviation (distance_scores' unit).
  log_distance_mean: float = 0.0
  log_distance_std: float = 1.0

  def columns(self, features):
    """This support's block of `features` ([batch, all features], numpy or tf)."""
    return features[:, self.start:self.start + self.class_means.shape[1]]


# An ensemble's support: the union of its members', each in its own feature space. One
# FeatureSupport or a tuple of them, wherever a support is taken.
Support = Union[FeatureSupport, Tuple[FeatureSupport, ...]]


def _parts(support: Support) -> Tuple[FeatureSupport, ...]:
  return (support,) if isinstance(support, FeatureSupport) else tuple(support)


def class_statistics(features: np.ndarray, labels: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """The per-class feature means and the inverse of the shared (tied) covariance, with a ridge
  of 1e-6 of its mean variance so that it is invertible."""
  x = np.asarray(features, np.float64)
  labels = np.asarray(labels).reshape(-1)
  classes = np.unique(labels)
  means = np.stack([x[labels == c].mean(axis=0) for c in classes])
  centred = x - means[np.searchsorted(classes, labels)]
  covariance = centred.T @ centred / len(x)
  covariance += 1e-6 * np.trace(covariance) / len(covariance) * np.eye(len(covariance))
  return means, np.linalg.inv(covariance)


def mahalanobis_distance(features: np.ndarray, class_means: np.ndarray,
                         precision: np.ndarray) -> np.ndarray:
  """Each example's Mahalanobis distance to the nearest class mean."""
  diff = np.asarray(features, np.float64)[:, np.newaxis, :] - class_means[np.newaxis]
  return np.sqrt(np.maximum(np.einsum("ncd,de,nce->nc", diff, precision, diff), 0.0).min(axis=1))


def within_support(features: np.ndarray, support: Support) -> np.ndarray:
  """[batch] whether each input's features lie within the support's radius (for a union,
  within some part's radius in that part's own columns)."""
  features = np.asarray(features)
  return np.any([mahalanobis_distance(part.columns(features), part.class_means, part.precision)
                 <= part.radius for part in _parts(support)], axis=0)


def _served_distances(features: tf.Tensor, part: FeatureSupport) -> tf.Tensor:
  """[batch] mahalanobis_distance in the serving graph (float64, as the fit computed it)."""
  means = tf.constant(part.class_means, tf.float64)
  diff = tf.cast(part.columns(features), tf.float64)[:, tf.newaxis, :] - means[tf.newaxis]
  squared = tf.einsum("ncd,de,nce->nc", diff, tf.constant(part.precision, tf.float64), diff)
  return tf.sqrt(tf.maximum(tf.reduce_min(squared, axis=1), 0.0))


def served_temperatures(features: tf.Tensor, support: Support, temperature: float) -> tf.Tensor:
  """[batch] temperatures the served model divides logits by under `in_support`: T where an
  input lies within_support, 1 beyond."""
  inside = [_served_distances(features, part) <= part.radius for part in _parts(support)]
  return tf.where(tf.reduce_any(tf.stack(inside), axis=0), tf.constant(temperature, tf.float32),
                  tf.constant(1.0, tf.float32))


def distance_scores(features: np.ndarray, support: Support) -> np.ndarray:
  """[batch] how far each input lies from the training data: the log of its Mahalanobis
  distance in standard deviations of the eval images' log distances above their mean (0: as far
  as a typical eval image); for a union, its nearest part's."""
  features = np.asarray(features)
  return np.min([(np.log(np.maximum(mahalanobis_distance(
      part.columns(features), part.class_means, part.precision), _MIN_DISTANCE)) -
                  part.log_distance_mean) / part.log_distance_std
                 for part in _parts(support)], axis=0)


def served_distance_scores(features: tf.Tensor, support: Support) -> tf.Tensor:
  """distance_scores in the serving graph ([batch] float64)."""
  return tf.reduce_min(tf.stack([
      (tf.math.log(tf.maximum(_served_distances(features, part), _MIN_DISTANCE)) -
       part.log_distance_mean) / part.log_distance_std for part in _parts(support)]), axis=0)


class DistanceCurve(NamedTuple):
  """`distance_curve`'s map: log T = log_temperature + slope * distance score, within
  [MIN_TEMPERATURE, MAX_TEMPERATURE]. slope >= 0: never sharper farther from the data."""
  log_temperature: float  # log T of an input as far from the data as a typical eval image.
  slope: float  # d log T / d score.

  def temperatures(self, scores: np.ndarray) -> np.ndarray:
    return np.clip(np.exp(self.log_temperature + self.slope * np.asarray(scores, np.float64)),
                   MIN_TEMPERATURE, MAX_TEMPERATURE)

  def served_temperatures(self, scores: tf.Tensor) -> tf.Tensor:
    """temperatures() in the serving graph: [batch] float32 from float64 scores."""
    return tf.cast(tf.clip_by_value(
        tf.exp(self.log_temperature + self.slope * tf.cast(scores, tf.float64)),
        MIN_TEMPERATURE, MAX_TEMPERATURE), tf.float32)


def _per_example_nll(logits: np.ndarray, labels: np.ndarray,
                     temperatures: np.ndarray) -> np.ndarray:
  log_p = log_softmax(logits / temperatures[:, np.newaxis])
  return -log_p[np.arange(len(labels)), labels]


def fit_distance_curve(clean_logits: np.ndarray, clean_labels: np.ndarray,
                       clean_scores: np.ndarray, shifted_logits: np.ndarray,
                       shifted_labels: np.ndarray, shifted_slices: np.ndarray,
                       shifted_scores: np.ndarray, num_bins: int = 15) -> DistanceCurve:
  """The curve minimising the mean, over the clean eval images and each shifted slice, of the
  slice's NLL; then drawn towards the raw softmax until the shifted slices' mean NLL and mean
  ECE are no worse than raw (see the module docstring). Deterministic: L-BFGS-B from the
  clean fit, then a fixed grid."""
  from scipy import optimize
  clean_logits, shifted_logits = (np.asarray(x, np.float64) for x in (clean_logits,
                                                                       shifted_logits))
  clean_labels, shifted_labels = (np.asarray(y, np.int64).reshape(-1)
                                  for y in (clean_labels, shifted_labels))
  for logits, labels in ((clean_logits, clean_labels), (shifted_logits, shifted_labels)):
    _check(logits, labels)
  shifted_slices = np.asarray(shifted_slices)
  if not len(shifted_slices) == len(shifted_scores) == len(shifted_labels):
    raise TemperatureFitError(f"{len(shifted_labels)} shifted examples but "
                              f"{len(shifted_slices)} slice names and {len(shifted_scores)} "
                              "distance scores.")
  logits = np.concatenate([clean_logits, shifted_logits])
  labels = np.concatenate([clean_labels, shifted_labels])
  scores = np.concatenate([np.asarray(clean_scores, np.float64),
                           np.asarray(shifted_scores, np.float64)])
  slices = np.concatenate([np.full(len(clean_labels), "\0clean"), shifted_slices.astype(str)])
  names, index = np.unique(slices, return_inverse=True)
  weights = 1.0 / (len(names) * np.bincount(index)[index])  # Each slice weighs the same.

  def objective(params):
    curve = DistanceCurve(*params)
    return float(np.sum(weights * _per_example_nll(logits, labels,
                                                   curve.temperatures(scores))))

  start = [float(np.log(fit_temperature(clean_logits, clean_labels))), 0.0]
  bounds = [(np.log(MIN_TEMPERATURE), np.log(MAX_TEMPERATURE)), (0.0, None)]
  fitted = DistanceCurve(*optimize.minimize(objective, start, method="L-BFGS-B",
                                            bounds=bounds).x)
  raw_nll, raw_ece = slice_means(shifted_logits, shifted_labels, shifted_slices, 1.0, num_bins)
  for step in range(_ECE_GRID_STEPS, 0, -1):
    curve = DistanceCurve(fitted.log_temperature * step / _ECE_GRID_STEPS,
                          fitted.slope * step / _ECE_GRID_STEPS)
    moved = shifted_logits / curve.temperatures(shifted_scores)[:, np.newaxis]
    shifted_nll, shifted_ece = slice_means(moved, shifted_labels, shifted_slices, 1.0, num_bins)
    if shifted_nll <= raw_nll and shifted_ece <= raw_ece:
      return DistanceCurve(float(curve.log_temperature), float(curve.slope))
  return DistanceCurve(0.0, 0.0)


def penultimate_model(model) -> "keras.Model":
  """A model mapping `model`'s input to the features its logits layer reads (the output of its
  one global average pooling), sharing its weights."""
  import tf_keras as keras
  pooling = [layer for layer in model.layers
             if isinstance(layer, keras.layers.GlobalAveragePooling2D)]
  if len(pooling) != 1:
    raise TemperatureFitError(
        f"temperature_fit=in_support needs a network with one global average pooling before its "
        f"logits (a Wide ResNet); {model.name} has {len(pooling)}.")
  return keras.Model(model.inputs, pooling[0].output)


def support_from_features(train_features: np.ndarray, train_labels: np.ndarray,
                          eval_features: np.ndarray, start: int = 0) -> FeatureSupport:
  """The training classes' feature statistics and the eval images' largest distance."""
  means, precision = class_statistics(train_features, train_labels)
  distances = mahalanobis_distance(eval_features, means, precision)
  log_distances = np.log(np.maximum(distances, _MIN_DISTANCE))
  # A relative slack of 1e-6: the farthest eval image stays inside when serving recomputes its
  # features and distance with other rounding.
  return FeatureSupport(means, precision, float(distances.max()) * (1.0 + 1e-6), start,
                        float(log_distances.mean()), float(max(log_distances.std(), 1e-6)))


def feature_support(features_model, train_batches: tf.data.Dataset,
                    eval_batches: tf.data.Dataset,
                    feature_widths: Optional[Sequence[int]] = None) -> Support:
  """support_from_features of the features `features_model` gives on the two splits; with
  `feature_widths` (an ensemble's members' features side by side), the union of each block's
  own support."""
  train_features, train_labels = model_logits(features_model, train_batches)
  eval_features = model_logits(features_model, eval_batches)[0]
  if not feature_widths or len(feature_widths) == 1:
    return support_from_features(train_features, train_labels, eval_features)
  if sum(feature_widths) != train_features.shape[1]:
    raise ValueError(f"Feature blocks of widths {list(feature_widths)} do not cover the "
                     f"{train_features.shape[1]} features.")
  starts = np.cumsum([0] + list(feature_widths[:-1]))
  return tuple(support_from_features(train_features[:, s:s + w], train_labels,
                                     eval_features[:, s:s + w], int(s))
               for s, w in zip(starts, feature_widths))


def _per_example(logits: np.ndarray, temperature: float,
                 applies: Optional[np.ndarray]) -> np.ndarray:
  """Logits divided by T where it applies (everywhere when `applies` is None), else by 1."""
  if applies is None:
    return logits / temperature
  return logits / np.where(applies, temperature, 1.0)[:, np.newaxis]


def model_logits(model, batches: tf.data.Dataset) -> Tuple[np.ndarray, np.ndarray]:
  """The model's float logits and the labels over (images, labels) batches, or (images, labels,
  weights) batches whose weight-0 rows are padding and are left out. The model runs as one
  traced graph: an eager Keras call costs several times the forward pass itself (and Keras'
  own predict_on_batch was slower still here)."""
  predict = tf.function(lambda images: model(images, training=False), autograph=False,
                        input_signature=[batches.element_spec[0]])
  logits, labels = [], []
  for batch in batches:
    images, batch_labels = batch[0], batch[1].numpy().reshape(-1)
    batch_logits = predict(images).numpy().astype(np.float32)
    if len(batch) > 2:
      keep = batch[2].numpy().reshape(-1) > 0
      batch_logits, batch_labels = batch_logits[keep], batch_labels[keep]
    logits.append(batch_logits)
    labels.append(batch_labels)
  if not logits or not sum(len(l) for l in labels):
    raise TemperatureFitError("The eval split is empty; there is nothing to fit the "
                              "temperature on.")
  return np.concatenate(logits), np.concatenate(labels)


class ShiftedSet(NamedTuple):
  batches: tf.data.Dataset  # (images, labels) batches, in a fixed order.
  slices: np.ndarray  # Each example's slice name (corruption_severity), in the same order.


def calibrate(model, eval_batches: tf.data.Dataset,
              augmented_batches: Optional[tf.data.Dataset] = None,
              validation_corrupted: Optional[ShiftedSet] = None,
              num_bins: int = 15, train_batches: Optional[tf.data.Dataset] = None,
              features_model=None, feature_widths: Optional[Sequence[int]] = None,
              distance_curve: bool = False) -> dict:
  """Fits T on the eval split; with its AugMix views (`select_temperature`) or its validation
  corruptions (`select_temperature_under_shift`) when given (at most one of the two); with the
  validation corruptions and the train split's batches, `in_support`, or with distance_curve a
  T per input (`fit_distance_curve`; the returned "feature_support" and "distance_curve" are
  what serving needs), in the feature space of `features_model` (by default the network's
  penultimate_model; with `feature_widths`, the union of the supports of its blocks, see
  feature_support). Returns T (under distance_curve, the T of a typical eval image) with the
  NLLs (and ECEs) before and after, and those of the clean-only fit, for the record."""
  if augmented_batches is not None and validation_corrupted is not None:
    raise ValueError("Give AugMix views or validation corruptions, not both.")
  if train_batches is not None and validation_corrupted is None:
    raise ValueError("A fit by feature distance (in_support, distance_curve) needs the "
                     "validation corruptions.")
  if distance_curve and train_batches is None:
    raise ValueError("temperature_fit=distance_curve needs the train split's batches.")
  logits, labels = model_logits(model, eval_batches)
  clean_fit = fit_temperature(logits, labels)
  info = {"temperature_fit": "clean", "clean_fit_temperature": clean_fit,
          "eval_examples": int(len(labels)), "eval_nll_before": nll(logits, labels),
          "eval_ece_before": ece(logits, labels, 1.0, num_bins)}
  temperature = clean_fit
  eval_temperatures = None  # Per eval example, under distance_curve.
  if validation_corrupted is not None:
    shifted_logits, shifted_labels = model_logits(model, validation_corrupted.batches)
    slices = validation_corrupted.slices
    applies = None
    shifted_temperatures = None
    info.update(temperature_fit="validation_corruptions")
    if train_batches is not None:
      features_model = features_model or penultimate_model(model)
      support = feature_support(features_model, train_batches, eval_batches, feature_widths)
      shifted_features = model_logits(features_model, validation_corrupted.batches)[0]
      radii = [part.radius for part in _parts(support)]
      info.update(feature_support=support,
                  support_radius=radii[0] if len(radii) == 1 else radii)
      if distance_curve:
        eval_scores = distance_scores(model_logits(features_model, eval_batches)[0], support)
        shifted_scores = distance_scores(shifted_features, support)
        curve = fit_distance_curve(logits, labels, eval_scores, shifted_logits, shifted_labels,
                                   slices, shifted_scores, num_bins)
        eval_temperatures = curve.temperatures(eval_scores)
        shifted_temperatures = curve.temperatures(shifted_scores)
        temperature = float(np.exp(curve.log_temperature))
        info.update(temperature_fit="distance_curve", distance_curve=curve._asdict(),
                    eval_distance_scores=eval_scores.tolist(),
                    validation_distance_scores=shifted_scores.tolist())
      else:
        applies = within_support(shifted_features, support)
        info.update(temperature_fit="in_support",
                    validation_inside_support=float(np.mean(applies)))
    if shifted_temperatures is None:
      temperature = select_temperature_under_shift(logits, labels, shifted_logits,
                                                   shifted_labels, slices, num_bins, applies)
    info.update(validation_corruptions=list(VALIDATION_CORRUPTIONS),
                validation_examples=int(len(shifted_labels)),
                validation_slices=[str(name) for name in slices],
                validation_accuracy=float(np.mean(shifted_logits.argmax(axis=1) ==
                                                  shifted_labels)))
    after = (shifted_logits / shifted_temperatures[:, np.newaxis]
             if shifted_temperatures is not None
             else _per_example(shifted_logits, temperature, applies))
    for name, moved in (("before", shifted_logits), ("after", after),
                        ("clean_fit", _per_example(shifted_logits, clean_fit, applies))):
      (info[f"validation_nll_{name}"], info[f"validation_ece_{name}"]) = slice_means(
          moved, shifted_labels, slices, 1.0, num_bins)
  if augmented_batches is not None:
    augmented_logits, augmented_labels = model_logits(model, augmented_batches)
    temperature = select_temperature(logits, labels, augmented_logits, augmented_labels)
    info.update(temperature_fit="clean_and_augmix",
                augmented_examples=int(len(augmented_labels)),
                augmented_nll_before=nll(augmented_logits, augmented_labels),
                augmented_nll_after=nll(augmented_logits, augmented_labels, temperature),
                augmented_nll_clean_fit=nll(augmented_logits, augmented_labels, clean_fit))
  # Every eval image is within the support's radius: under in_support T applies to all.
  served_eval = logits / (temperature if eval_temperatures is None
                          else eval_temperatures[:, np.newaxis])
  info.update(temperature=temperature, eval_nll_after=nll(served_eval, labels),
              eval_ece_after=ece(served_eval, labels, 1.0, num_bins))
  log.info("Temperature scaling (%s) on %d eval examples: T = %.4f (clean-only fit %.4f), "
           "eval NLL %.4f -> %.4f.", info["temperature_fit"], info["eval_examples"],
           temperature, clean_fit, info["eval_nll_before"], info["eval_nll_after"])
  return info


def channel_statistics(tft_output) -> Tuple[tf.Tensor, tf.Tensor]:
  """The per-channel mean and std that Transform normalises with, read back from its graph:
  a black and a white image normalise to -mean/std and (1 - mean)/std."""
  from trainer_module.features import IMAGE_KEY, IMAGE_SHAPE
  images = [tf.io.encode_png(tf.fill(IMAGE_SHAPE, tf.constant(value, tf.uint8)))
            for value in (0, 255)]
  layer = tft_output.transform_features_layer()  # What serving applies (TF1 graph, eager-safe).
  normalised = layer({IMAGE_KEY: tf.stack(images)})[IMAGE_KEY]
  black, white = normalised[0, 0, 0], normalised[1, 0, 0]
  std = 1.0 / (white - black)
  return -black * std, std


def augmented_eval_batches(eval_batches: tf.data.Dataset, mean: tf.Tensor, std: tf.Tensor,
                           seed: int, params) -> tf.data.Dataset:
  """One AugMix view (training-time parameters) of every eval image, normalised like it; the
  view's seed comes from the image's position, so every run sees the same views."""
  from trainer_module import augmix
  from trainer_module.preprocessing import denormalize_to_uint8, normalize

  def augment(index, batch):
    images = denormalize_to_uint8(batch[0], mean, std)
    keys = tf.strings.join(["calibration/", tf.strings.as_string(
        index * tf.cast(tf.shape(images)[0], tf.int64) + tf.range(tf.shape(images)[0],
                                                                  dtype=tf.int64))])
    seeds = augmix.example_seeds(keys, seed, 0, tf.zeros(tf.shape(keys), tf.int64))
    views = augmix.augment_and_mix(images, seeds, params)
    return (normalize(views, mean, std),) + tuple(batch[1:])

  return eval_batches.enumerate().map(augment)


def validation_corrupted_set(eval_batches: tf.data.Dataset, mean: tf.Tensor, std: tf.Tensor,
                             per_slice: int, batch_size: int) -> ShiftedSet:
  """`per_slice` eval images (chosen by a hash of their key) under each validation corruption at
  each severity, made by tfds' corruption code (trainer_module/reference_corruptions.py) and
  normalised like the images, as (images, labels) batches with each example's slice name. An
  image's key is a hash of its pixels, so the same eval split gives the same set on every run,
  in any order."""
  from trainer_module.preprocessing import denormalize_to_uint8, normalize
  images, labels = [], []
  for batch in eval_batches:
    keep = batch[2].numpy().reshape(-1) > 0 if len(batch) > 2 else slice(None)
    images.append(denormalize_to_uint8(batch[0], mean, std).numpy()[keep])
    labels.append(batch[1].numpy().reshape(-1)[keep])
  if not sum(len(batch) for batch in labels):
    raise TemperatureFitError("The eval split is empty; there are no images to corrupt for "
                              "the temperature fit.")
  images, labels = np.concatenate(images), np.concatenate(labels)
  keys = [hashlib.sha256(image.tobytes()).hexdigest() for image in images]
  chosen = reference_corruptions.subsample(
      [(key, index, int(labels[index])) for index, key in enumerate(keys)], per_slice)
  slices = [(name, severity) for name in VALIDATION_CORRUPTIONS
            for severity in reference_corruptions.SEVERITIES]
  corrupted = list(reference_corruptions.corrupt_all(
      [(images[index], name, severity, key) for name, severity in slices
       for key, index, _ in chosen]))
  corrupted_labels = [label for _ in slices for _, _, label in chosen]
  slices = [f"{name}_{severity}" for name, severity in slices for _ in chosen]
  images01 = tf.constant(np.stack(corrupted), tf.float32) / 255.0
  return ShiftedSet(tf.data.Dataset.from_tensor_slices(
      (normalize(images01, mean, std), np.asarray(corrupted_labels, np.int64))).batch(batch_size),
                    np.asarray(slices))


FEATURE_SUPPORT_PATH = os.path.join("assets.extra", "feature_support.npz")


def write_calibration_info(export_dir: str, info: dict) -> None:
  """Records T beside the SavedModel (assets.extra is copied with it, ignored by serving). A
  feature support, a constant of the serving graph, is also written as arrays
  (FEATURE_SUPPORT_PATH), so that numpy can recompute what the model serves (an ensemble's
  members, the benches)."""
  path = os.path.join(export_dir, CALIBRATION_INFO_PATH)
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "w") as f:
    json.dump({key: value for key, value in info.items() if key != "feature_support"}, f,
              indent=2)
  if info.get("feature_support") is not None:
    parts = _parts(info["feature_support"])
    arrays = {f"{field}_{index}": np.asarray(getattr(part, field))
              for index, part in enumerate(parts) for field in FeatureSupport._fields}
    buffer = io.BytesIO()  # numpy's zip writer seeks; object storage files do not.
    np.savez(buffer, parts=len(parts), **arrays)
    with tf.io.gfile.GFile(os.path.join(export_dir, FEATURE_SUPPORT_PATH), "wb") as f:
      f.write(buffer.getvalue())


def read_calibration_info(model_dir: str) -> dict:
  with tf.io.gfile.GFile(os.path.join(model_dir, CALIBRATION_INFO_PATH)) as f:
    return json.load(f)


def read_feature_support(model_dir: str) -> Support:
  """The feature support a model was exported with (write_calibration_info)."""
  with tf.io.gfile.GFile(os.path.join(model_dir, FEATURE_SUPPORT_PATH), "rb") as f:
    arrays = np.load(io.BytesIO(f.read()))
    parts = tuple(FeatureSupport(*(arrays[f"{field}_{index}"] if field in ("class_means",
                                                                          "precision")
                                   else arrays[f"{field}_{index}"].item()
                                   for field in FeatureSupport._fields))
                  for index in range(int(arrays["parts"])))
  return parts[0] if len(parts) == 1 else parts


def served_calibration(info: dict, support: Support, features: np.ndarray) -> np.ndarray:
  """[batch] the temperatures a model calibrated as `info` records serves inputs of these
  penultimate `features` with (numpy; export.py serves the same in its graph)."""
  fit = info.get("temperature_fit")
  if fit == "distance_curve":
    return DistanceCurve(**info["distance_curve"]).temperatures(distance_scores(features,
                                                                                support))
  if fit == "in_support":
    return np.where(within_support(features, support), info["temperature"], 1.0)
  return np.full(len(features), info.get("temperature", 1.0))
