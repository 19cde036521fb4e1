"""Accuracy, NLL, Brier score and ECE in plain vectorised numpy: the independent reference that
the trainer's on-device metrics and TFMA's are checked against (tests, bench/evaluator.py).

ECE bins are found here with np.histogram's edges, independently of
trainer_module.metrics.confidence_bins, under the same rule: bin i holds [i/B, (i+1)/B), and a
confidence of 1 falls in the last bin."""
import numpy as np

PROBABILITY_FLOOR = 1e-12


def metrics(probabilities: np.ndarray, labels: np.ndarray, num_bins: int = 15) -> dict:
  p = np.asarray(probabilities, np.float64)
  y = np.asarray(labels, np.int64).reshape(-1)
  n = len(y)
  predicted = p.argmax(axis=1)
  confidence = p[np.arange(n), predicted]
  correct = (predicted == y).astype(np.float64)
  # np.histogram's bins are half-open [a, b) except the last, which is closed: the same rule.
  counts, _ = np.histogram(confidence, bins=num_bins, range=(0.0, 1.0))
  correct_sums, _ = np.histogram(confidence, bins=num_bins, range=(0.0, 1.0), weights=correct)
  confidence_sums, _ = np.histogram(confidence, bins=num_bins, range=(0.0, 1.0),
                                    weights=confidence)
  assert counts.sum() == n
  ece = np.abs(correct_sums - confidence_sums).sum() / n
  one_hot = np.eye(p.shape[1])[y]
  occupied = np.maximum(counts, 1)
  reliability = np.stack([counts, np.where(counts > 0, confidence_sums / occupied, 0.0),
                          np.where(counts > 0, correct_sums / occupied, 0.0)], axis=1)
  return {"accuracy": correct.mean(),
          "reliability": reliability,  # Per bin: examples, mean confidence, accuracy (0 if empty).
          "nll": -np.log(np.maximum(p[np.arange(n), y], PROBABILITY_FLOOR)).mean(),
          "brier_score": ((p - one_hot) ** 2).sum(axis=1).mean(),
          "ece": ece}
