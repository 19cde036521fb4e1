"""Accuracy, NLL and ECE as accumulated on devices, against a plain numpy computation."""
import math
from fractions import Fraction

import numpy as np
import pytest
import tensorflow as tf

from test_support import reference_metrics
from trainer_module.metrics import (ClassificationMetrics, binomial_mean_absolute_deviation,
                                    confidence_bins, ece_floor)


def test_batches_accumulate_to_the_numpy_metrics_and_padding_is_ignored():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 10, 300)
  logits = (rng.normal(size=(300, 10)) * 3).astype(np.float32)
  logits[np.arange(300), labels] += rng.normal(1.0, 2.0, 300).astype(np.float32)
  metrics = ClassificationMetrics(num_bins=15)
  for start in range(0, 300, 128):  # Uneven batches, the last one padded like eval_batches.
    batch_labels, batch_logits = labels[start:start + 128], logits[start:start + 128]
    pad = 128 - len(batch_labels)
    metrics.update(tf.constant(np.pad(batch_labels, (0, pad), constant_values=-1)),
                   tf.constant(np.pad(batch_logits, ((0, pad), (0, 0)))),
                   tf.constant([1.0] * len(batch_labels) + [0.0] * pad))
  probabilities = np.exp(logits - logits.max(-1, keepdims=True))
  expected = reference_metrics.metrics(probabilities / probabilities.sum(-1, keepdims=True),
                                       labels, 15)
  result = metrics.result()
  assert set(result) == {"accuracy", "nll", "ece"}
  for name, value in result.items():
    assert value == pytest.approx(expected[name], abs=1e-6), name


def test_perfectly_confident_correct_predictions_are_calibrated_and_reset_clears():
  metrics = ClassificationMetrics(num_bins=15)
  metrics.update(tf.constant([0, 1]), tf.constant([[50.0, 0.0], [0.0, 50.0]]))
  assert metrics.result()["ece"] == pytest.approx(0.0, abs=1e-6)
  assert metrics.result()["accuracy"] == 1.0
  metrics.reset()
  with pytest.raises(ValueError, match=r"^No examples were evaluated\.$"):
    metrics.result()


@pytest.mark.parametrize("confidence, expected_bin", [
    (0.0, 0), (0.099, 0), (0.1, 1), (0.55, 5), (0.9, 9), (0.95, 9), (1.0, 9)])
def test_a_bin_holds_its_lower_edge_not_its_upper_one_and_1_falls_in_the_last(confidence,
                                                                              expected_bin):
  assert int(confidence_bins(confidence, 10)) == expected_bin
  assert int(confidence_bins(tf.constant(confidence, tf.float64), 10)) == expected_bin
  counts, _ = np.histogram([confidence], bins=10, range=(0.0, 1.0))  # The reference's rule.
  assert int(np.argmax(counts)) == expected_bin


def test_on_device_and_numpy_bins_agree_on_many_confidences():
  confidence = np.random.default_rng(3).uniform(size=5000).astype(np.float32)
  np.testing.assert_array_equal(confidence_bins(tf.constant(confidence), 15).numpy(),
                                confidence_bins(confidence, 15))


@pytest.mark.parametrize("confidence, num_bins", [(0.7, 10), (0.9, 10), (5 / 6, 6)])
def test_a_float32_confidence_falls_in_the_bin_of_its_exact_value(confidence, num_bins):
  """float32(0.7) is 0.69999999 (bin 6 of 10, as TFMA's float64 metric bins it), but its
  product with 10 rounds to 7.0 in float32."""
  value = np.float32(confidence)
  exact_bin = math.floor(Fraction(float(value)) * num_bins)
  assert exact_bin == math.floor(confidence * num_bins) - 1  # Just below an edge.
  assert int(value * np.float32(num_bins)) == exact_bin + 1  # Where float32 puts it.
  assert int(confidence_bins(value, num_bins)) == exact_bin
  assert int(confidence_bins(np.array([value]), num_bins)[0]) == exact_bin
  assert int(confidence_bins(tf.constant(value), num_bins)) == exact_bin


def test_the_accumulators_sum_over_replicas_on_read_and_are_not_trained():
  """Each replica adds to its own copy, with no cross-replica traffic per step; a Keras model or
  optimizer tracking the metric must not see them as weights."""
  with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
    module = tf.Module()
    module.metrics = ClassificationMetrics(num_bins=15)
  assert len(module.variables) == 5
  assert not module.trainable_variables
  for variable in module.variables:
    assert variable.synchronization == tf.VariableSynchronization.ON_READ
    assert variable.aggregation == tf.VariableAggregation.SUM


@pytest.mark.parametrize("labels, logits", [(np.zeros([2, 3]), np.zeros([2, 3, 4])),
                                            (np.zeros([2]), np.zeros([4])),
                                            (np.zeros([2, 1]), np.zeros([2, 4]))])
def test_update_takes_a_batch_of_logits_over_classes_and_its_labels(labels, logits):
  metrics = ClassificationMetrics(num_bins=15)
  with pytest.raises(ValueError, match=r"logits \[batch, classes\] and labels \[batch\]"):
    metrics.update(tf.constant(labels, tf.int64), tf.constant(logits, tf.float32))


def _exact_mean_absolute_deviation(n, p):
  """E|X - np| summed over the binomial's support in exact rational arithmetic."""
  p = Fraction(p)
  return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) * abs(k - n * p)
             for k in range(n + 1))


@pytest.mark.parametrize("n,p", [(1, 0.5), (2, 0.5), (7, 0.3), (30, 0.95), (292, 0.8125),
                                 (500, 0.99609375), (13, 0.0625)])
def test_the_binomial_deviation_is_the_exact_sum_over_its_support(n, p):
  assert binomial_mean_absolute_deviation(n, p) == pytest.approx(
      float(_exact_mean_absolute_deviation(n, p)), rel=1e-9)


def test_the_ece_floor_weights_each_bins_expected_gap_and_shrinks_with_the_slice():
  counts, confidences = [4, 0, 6], [0.55, 0.0, 0.95]
  expected = (_exact_mean_absolute_deviation(4, 0.55)
              + _exact_mean_absolute_deviation(6, 0.95)) / 10
  assert ece_floor(counts, confidences) == pytest.approx(float(expected), rel=1e-9)
  assert ece_floor([1, 1], [1.0, 0.0]) == 0.0  # Certain bins have no sampling noise.
  assert math.isnan(ece_floor([0, 0], [0.5, 0.5]))
  assert ece_floor([1, 0], [0.5, 0.3]) == pytest.approx(0.5)  # One example: E|B(1, .5) - .5|.
  # 1 / sqrt(n): a 100-image slice at confidence 0.8 sits near 0.032, 900 images near 0.011.
  assert ece_floor([100], [0.8]) == pytest.approx(3 * ece_floor([900], [0.8]), rel=0.02)


def test_updates_in_replica_context_sum_into_the_result_read_across_replicas():
  """As training uses them: created under a MirroredStrategy, updated in replica context, read
  outside it; each statistic is summed over the replicas' updates. (One device here; with
  several, mirrored writes would read the same sums: the ON_READ test above pins the variables'
  kind.)"""
  rng = np.random.default_rng(1)
  labels = rng.integers(0, 10, 64)
  logits = (rng.normal(size=(64, 10)) * 3).astype(np.float32)
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  with strategy.scope():
    metrics = ClassificationMetrics(num_bins=15)
  for start in (0, 32):
    strategy.run(tf.function(lambda: metrics.update(tf.constant(labels[start:start + 32]),
                                                    tf.constant(logits[start:start + 32]))))
  probabilities = np.exp(logits - logits.max(-1, keepdims=True))
  expected = reference_metrics.metrics(probabilities / probabilities.sum(-1, keepdims=True),
                                       labels, 15)
  assert metrics.result() == pytest.approx({name: expected[name]
                                            for name in ("accuracy", "nll", "ece")}, abs=1e-6)
