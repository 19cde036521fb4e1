"""bench/calibration.py: the table it prints and the distance_curve row it fits."""
import numpy as np
import pytest

from bench import calibration
from bench.run_outputs import LabelledSet
from trainer_module import temperature


def _labelled(logits, labels, slices=None):
  slices = np.full(len(labels), "") if slices is None else np.asarray(slices)
  return LabelledSet(np.asarray(logits, np.float64), np.asarray(labels), slices)


def _sampled(rng, count, scale, true_temperature, classes=5):
  """Logits whose labels are drawn from softmax(logits / true_temperature)."""
  logits = rng.normal(0.0, scale, (count, classes))
  p = np.exp(logits / true_temperature)
  p /= p.sum(axis=1, keepdims=True)
  return logits, np.array([rng.choice(classes, p=row) for row in p])


def _sets(rng):
  """Under-confident clean data (true T = 0.5), over-confident shifted slices (true T = 2)."""
  eval_, test = (_labelled(*_sampled(rng, 400, 2.0, 0.5)) for _ in range(2))
  shifted = [_sampled(rng, 200, 4.0, 2.0) for _ in range(3)]
  validation = _labelled(np.concatenate([s[0] for s in shifted]),
                         np.concatenate([s[1] for s in shifted]),
                         np.repeat(["a_1", "b_1", "c_1"], 200))
  corrupted = _labelled(*_sampled(rng, 300, 4.0, 2.0), np.repeat(["x_1", "y_1", "z_1"], 100))
  return calibration.ModelSets(eval_, validation, eval_, test, corrupted)


def test_row_metrics_are_the_temperature_modules_metrics_of_the_scaled_logits():
  sets = _sets(np.random.default_rng(0))
  metrics = calibration.row_metrics(sets, {"test": 0.7, "corrupted": 0.7, "validation": 0.7}, 15)
  assert metrics["test_nll"] == pytest.approx(temperature.nll(sets.test.values,
                                                              sets.test.labels, 0.7))
  assert metrics["test_ece"] == pytest.approx(
      temperature.ece(sets.test.values, sets.test.labels, 0.7), abs=1e-6)
  assert (metrics["cNLL"], metrics["cECE"]) == pytest.approx(temperature.slice_means(
      sets.corrupted.values, sets.corrupted.labels, sets.corrupted.slices, 0.7), abs=1e-6)
  per_example = {name: np.full(len(getattr(sets, name).labels), 0.7)
                 for name in ("test", "corrupted", "validation")}
  assert calibration.row_metrics(sets, per_example, 15) == pytest.approx(metrics)
  corrupted_accuracy = np.mean([np.mean(sets.corrupted.values[i:i + 100].argmax(axis=1) ==
                                        sets.corrupted.labels[i:i + 100])
                                for i in (0, 100, 200)])
  assert metrics["cA"] == pytest.approx(corrupted_accuracy)


def test_the_table_has_a_row_per_way_of_choosing_with_every_column():
  values = {key: 0.123456 for _, key, _ in calibration.COLUMNS}
  lines = calibration.table([("raw softmax", "1.000", values),
                             ("`clean`", "0.450", dict(values, test_nll=0.05))]).splitlines()
  assert len(lines) == 4
  assert lines[0].startswith("| how T is chosen | T | clean test acc. |")
  assert lines[2] == "| raw softmax | 1.000 | " + " | ".join(
      f"{0.123456:.{digits}f}" for _, _, digits in calibration.COLUMNS) + " |"
  assert "| 0.0500 |" in lines[3]
  assert all(line.count("|") == len(calibration.COLUMNS) + 3 for line in lines)


def test_the_distance_curve_row_fits_on_eval_and_validation_and_scales_each_input():
  """The row is temperature.fit_distance_curve on the support's distance scores: under-
  confident clean data near the training features, over-confident shifted data far away."""
  rng = np.random.default_rng(1)
  sets = _sets(rng)
  train = rng.normal(0.0, 1.0, (200, 4))
  near = lambda n: rng.normal(0.0, 1.0, (n, 4))  # noqa: E731
  far = lambda n: rng.normal(0.0, 6.0, (n, 4))  # noqa: E731
  features = {"train": train, "eval": near(len(sets.eval.labels)),
              "validation": far(len(sets.validation.labels)), "test": near(len(sets.test.labels)),
              "corrupted": far(len(sets.corrupted.labels))}
  support = temperature.support_from_features(train, np.arange(200) % 2, features["eval"])
  get = lambda name: _labelled(features[name], np.zeros(len(features[name]), int))  # noqa: E731
  name, label, metrics = calibration.distance_curve_row(sets, support, get, 15)
  assert name.startswith("`distance_curve`") and label.startswith("exp(")
  scores = {n: temperature.distance_scores(features[n], support) for n in features}
  curve = temperature.fit_distance_curve(
      sets.eval.values, sets.eval.labels, scores["eval"], sets.validation.values,
      sets.validation.labels, sets.validation.slices, scores["validation"], 15)
  assert curve.slope > 0 and curve.temperatures(np.zeros(1))[0] < 1
  assert metrics == pytest.approx(calibration.row_metrics(
      sets, {n: curve.temperatures(scores[n]) for n in ("test", "corrupted", "validation")}, 15))
  raw = calibration.row_metrics(sets, {n: 1.0 for n in ("test", "corrupted", "validation")}, 15)
  assert metrics["test_nll"] < raw["test_nll"] and metrics["cNLL"] < raw["cNLL"]
