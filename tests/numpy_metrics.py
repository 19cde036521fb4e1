"""Accuracy, NLL, Brier score and ECE in vectorised numpy: the independent reference that TFMA's
numbers are checked against (tests, bench/evaluator.py)."""
import numpy as np

PROBABILITY_FLOOR = 1e-12


def metrics(probabilities: np.ndarray, labels: np.ndarray, num_bins: int = 15) -> dict:
  p = np.asarray(probabilities, np.float64)
  y = np.asarray(labels, np.int64).reshape(-1)
  n = len(y)
  predicted = p.argmax(axis=1)
  confidence = p[np.arange(n), predicted]
  correct = (predicted == y).astype(np.float64)
  # Bin i: confidence in (i/B, (i+1)/B]; the edges via searchsorted, not per-example ceil().
  edges = np.linspace(0.0, 1.0, num_bins + 1)
  bins = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, num_bins - 1)
  ece = sum(abs(correct[bins == b].sum() - confidence[bins == b].sum())
            for b in range(num_bins)) / n
  one_hot = np.eye(p.shape[1])[y]
  return {"accuracy": correct.mean(),
          "nll": -np.log(np.maximum(p[np.arange(n), y], PROBABILITY_FLOOR)).mean(),
          "brier_score": ((p - one_hot) ** 2).sum(axis=1).mean(),
          "ece": ece}
