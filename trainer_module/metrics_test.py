"""Accuracy, NLL and ECE as accumulated on devices, against a plain numpy computation."""
import numpy as np
import pytest
import tensorflow as tf

from testing import reference_metrics
from trainer_module.metrics import ClassificationMetrics, confidence_bins


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
  for name, value in metrics.result().items():
    assert value == pytest.approx(expected[name], abs=1e-6), name


def test_perfectly_confident_correct_predictions_are_calibrated_and_reset_clears():
  metrics = ClassificationMetrics(num_bins=15)
  metrics.update(tf.constant([0, 1]), tf.constant([[50.0, 0.0], [0.0, 50.0]]))
  assert metrics.result()["ece"] == pytest.approx(0.0, abs=1e-6)
  assert metrics.result()["accuracy"] == 1.0
  metrics.reset()
  with pytest.raises(ValueError, match="No examples"):
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
