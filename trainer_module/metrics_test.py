"""Accuracy, NLL and ECE as accumulated on devices, against a plain numpy computation."""
import numpy as np
import pytest
import tensorflow as tf

from trainer_module.metrics import ClassificationMetrics


def numpy_metrics(labels, logits, num_bins):
  probabilities = np.exp(logits - logits.max(-1, keepdims=True))
  probabilities /= probabilities.sum(-1, keepdims=True)
  confidence, predicted = probabilities.max(-1), probabilities.argmax(-1)
  correct = predicted == labels
  ece = 0.0
  edges = np.linspace(0, 1, num_bins + 1)
  for low, high in zip(edges[:-1], edges[1:]):
    in_bin = (confidence >= low) & ((confidence < high) | ((high == 1) & (confidence <= 1)))
    if in_bin.any():
      ece += in_bin.mean() * abs(correct[in_bin].mean() - confidence[in_bin].mean())
  nll = -np.log(probabilities[np.arange(len(labels)), labels]).mean()
  return {"accuracy": correct.mean(), "nll": nll, "ece": ece}


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
  expected = numpy_metrics(labels, logits, 15)
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
