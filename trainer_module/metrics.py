"""Accuracy, NLL and expected calibration error, accumulated on the devices across steps and
summed over replicas when read, so the numbers do not depend on how the batch was split.
"""
import math
from typing import Dict, Sequence

import numpy as np
import tensorflow as tf


def confidence_bins(confidence, num_bins: int):
  """The ECE bin of each top-label confidence, the project's one rule (the trainer's eval,
  TFMA's metrics, the temperature fit): bin i holds [i/B, (i+1)/B) and a confidence of 1 the
  last bin. It is tf.histogram_fixed_width_bins over [0, 1], which robustness_metrics' ECE uses
  (robustness_metrics/metrics/uncertainty.py, _KerasECEMetric.update_state). Tensors give
  int32 tensors (on device); anything else numpy int64. Both multiply in float64: a float32
  product rounds up across an edge (float32 0.7 is 0.69999999, in bin 6 of 10, but
  float32(0.69999999 * 10) is 7.0), and a float32 confidence is binned by its exact value."""
  if tf.is_tensor(confidence):
    return tf.minimum(tf.cast(tf.cast(confidence, tf.float64) * num_bins, tf.int32), num_bins - 1)
  return np.minimum((np.asarray(confidence, np.float64) * num_bins).astype(np.int64),
                    num_bins - 1)


def binomial_mean_absolute_deviation(n: int, p: float) -> float:
  """E|X - np| for X ~ Binomial(n, p), by de Moivre's closed form
  2 (m + 1) C(n, m + 1) p^(m + 1) (1 - p)^(n - m), m = floor(np); in log space, so exact to
  rounding for any n."""
  if n <= 0 or p <= 0.0 or p >= 1.0:
    return 0.0
  m = min(int(math.floor(n * p)), n - 1)
  log_term = (math.log(2.0 * (m + 1)) + math.lgamma(n + 1) - math.lgamma(m + 2)
              - math.lgamma(n - m) + (m + 1) * math.log(p) + (n - m) * math.log1p(-p))
  return math.exp(log_term)


def ece_floor(bin_counts: Sequence[float], bin_mean_confidences: Sequence[float]) -> float:
  """The ECE a perfectly calibrated model with these reliability bins would measure, in
  expectation: each bin's accuracy is then Binomial(n_b, c_b) / n_b, and ECE sums
  n_b / N * E|accuracy - c_b|. ECE on a finite slice is biased upward by this much."""
  counts = [int(round(float(n))) for n in bin_counts]
  total = sum(counts)
  if total <= 0:
    return float("nan")
  return sum(binomial_mean_absolute_deviation(n, float(c))
             for n, c in zip(counts, bin_mean_confidences)) / total


def batch_sums(labels, logits, num_bins: int, weights=None) -> Dict[str, tf.Tensor]:
  """What a batch adds to ClassificationMetrics' sums (float64 tensors): its example count,
  summed NLL and correct predictions, and per confidence bin the summed top-label confidence
  and correct predictions; `weights` (0 or 1) masks padding examples out."""
  logits = tf.cast(logits, tf.float32)
  if logits.shape.rank != 2 or labels.shape.rank != 1:
    raise ValueError(f"Expected logits [batch, classes] and labels [batch], got shapes "
                     f"{logits.shape} and {labels.shape}.")
  weights = tf.ones_like(labels, tf.float64) if weights is None else tf.cast(weights, tf.float64)
  nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(labels, 0),
                                                       logits=logits)
  probabilities = tf.nn.softmax(logits)
  confidence = tf.reduce_max(probabilities, axis=-1)
  correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=labels.dtype), labels),
                    tf.float64) * weights
  bins = confidence_bins(confidence, num_bins)
  confidence = tf.cast(confidence, tf.float64) * weights
  return {"count": tf.reduce_sum(weights),
          "nll": tf.reduce_sum(tf.cast(nll, tf.float64) * weights),
          "correct": tf.reduce_sum(correct),
          "bin_confidence": tf.math.unsorted_segment_sum(confidence, bins, num_bins),
          "bin_correct": tf.math.unsorted_segment_sum(correct, bins, num_bins)}


def expected_calibration_error(bin_correct, bin_confidence, count: float) -> float:
  """Per bin |accuracy - confidence| weighted by the bin's share of examples, from the bins'
  summed correct predictions and confidences over `count` examples."""
  gaps = abs(np.asarray(bin_correct) - np.asarray(bin_confidence))
  return float(gaps.sum()) / count


class ClassificationMetrics(tf.Module):
  """Create under the strategy's scope; `update` in replica context; `result` outside it.
  A tf.Module, so a checkpoint holds a partly accumulated epoch."""

  def __init__(self, num_bins: int):
    super().__init__()
    self.num_bins = num_bins

    def variable(shape=()):
      return tf.Variable(tf.zeros(shape, tf.float64), trainable=False,
                         synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)

    self._count = variable()
    self._nll = variable()
    self._correct = variable()
    self._bin_confidence = variable([num_bins])
    self._bin_correct = variable([num_bins])

  def update(self, labels, logits, weights=None):
    """Adds a batch; `weights` (0 or 1) masks padding examples out."""
    sums = batch_sums(labels, logits, self.num_bins, weights)
    self._count.assign_add(sums["count"])
    self._nll.assign_add(sums["nll"])
    self._correct.assign_add(sums["correct"])
    self._bin_confidence.assign_add(sums["bin_confidence"])
    self._bin_correct.assign_add(sums["bin_correct"])

  def result(self) -> Dict[str, float]:
    count = float(self._count.read_value())
    if count == 0:
      raise ValueError("No examples were evaluated.")
    return {"accuracy": float(self._correct.read_value()) / count,
            "nll": float(self._nll.read_value()) / count,
            "ece": expected_calibration_error(self._bin_correct.read_value(),
                                              self._bin_confidence.read_value(), count)}

  def reset(self):
    for variable in (self._count, self._nll, self._correct,
                     self._bin_confidence, self._bin_correct):
      variable.assign(tf.zeros_like(variable))
