"""bench/calibration.py: the table it prints, the rows it fits and its ceilings."""
import re

import numpy as np
import pytest

from bench import calibration
from bench.run_outputs import LabelledSet
from trainer_module.calibration import detail, distance_curve, distances, maths


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
  return calibration.ModelSets(eval_, validation, test, corrupted)


def test_row_metrics_are_the_temperature_modules_metrics_of_the_scaled_logits():
  sets = _sets(np.random.default_rng(0))
  metrics = calibration.row_metrics(sets, {"test": 0.7, "corrupted": 0.7, "validation": 0.7}, 15)
  assert metrics["test_nll"] == pytest.approx(maths.nll(sets.test.values,
                                                        sets.test.labels, 0.7))
  assert metrics["test_ece"] == pytest.approx(
      maths.ece(sets.test.values, sets.test.labels, 0.7), abs=1e-6)
  assert (metrics["cNLL"], metrics["cECE"]) == pytest.approx(maths.slice_means(
      sets.corrupted.values, sets.corrupted.labels, sets.corrupted.slices, 0.7), abs=1e-6)
  per_example = {name: np.full(len(getattr(sets, name).labels), 0.7)
                 for name in ("test", "corrupted", "validation")}
  assert calibration.row_metrics(sets, per_example, 15) == pytest.approx(metrics, nan_ok=True)
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
  """The row is distance_curve.fit_distance_curve on the support's distance scores: under-
  confident clean data near the training features, over-confident shifted data far away."""
  rng = np.random.default_rng(1)
  sets = _sets(rng)
  train = rng.normal(0.0, 1.0, (200, 4))
  near = lambda n: rng.normal(0.0, 1.0, (n, 4))  # noqa: E731
  far = lambda n: rng.normal(0.0, 6.0, (n, 4))  # noqa: E731
  features = {"train": train, "eval": near(len(sets.eval.labels)),
              "validation": far(len(sets.validation.labels)), "test": near(len(sets.test.labels)),
              "corrupted": far(len(sets.corrupted.labels))}
  support = distances.support_from_features(train, np.arange(200) % 2, features["eval"])
  get = lambda name: _labelled(features[name], np.zeros(len(features[name]), int))  # noqa: E731
  scores = calibration.distance_scores(support, get)
  name, label, metrics = calibration.distance_curve_row(sets, scores, 15)
  assert name == "the distance alone" and label.startswith("exp(")
  assert scores["test"] == pytest.approx(distances.distance_scores(features["test"], support))
  curve = distance_curve.fit_distance_curve(
      sets.eval.values, sets.eval.labels, scores["eval"], sets.validation.values,
      sets.validation.labels, sets.validation.slices, scores["validation"], 15)
  assert curve.slope > 0 and curve.temperatures(np.zeros(1))[0] < 1
  assert metrics == pytest.approx(calibration.row_metrics(
      sets, {n: curve.temperatures(scores[n]) for n in ("test", "corrupted", "validation")}, 15),
      nan_ok=True)
  raw = calibration.row_metrics(sets, {n: 1.0 for n in ("test", "corrupted", "validation")}, 15)
  assert metrics["test_nll"] < raw["test_nll"] and metrics["cNLL"] < raw["cNLL"]


def test_the_distance_detail_row_is_the_trainers_fit_with_each_sets_detail_scores():
  rng = np.random.default_rng(2)
  sets = _sets(rng)
  counts = {name: len(getattr(sets, name).labels)
            for name in ("eval", "validation", "test", "corrupted")}
  scores = {name: rng.normal(0.0 if name in ("eval", "test") else 4.0, 1.0, n)
            for name, n in counts.items()}
  images = {name: rng.normal(0.0, 1.0, (n, 8, 8, 3)) for name, n in counts.items()}
  for name in ("validation", "corrupted"):  # Smoothed: less detail than the eval images hold.
    images[name] = (images[name] + np.roll(images[name], 1, axis=1)) / 2
  details = calibration.detail_scores(images.get)
  assert details["eval"].mean() == pytest.approx(0.0, abs=1e-9)
  eval_unit = detail.detail_scale(images["eval"])  # Every set in the eval images' unit.
  for name in ("validation", "test", "corrupted"):
    np.testing.assert_allclose(details[name], detail.detail_scores(images[name], eval_unit))
  assert details["corrupted"].mean() < -1.0
  name, label, metrics = calibration.distance_detail_curve_row(sets, scores, details, 15)
  assert name.startswith("`distance_detail_curve`") and " s); median T" in label
  curve = distance_curve.fit_distance_curve(
      sets.eval.values, sets.eval.labels, scores["eval"], sets.validation.values,
      sets.validation.labels, sets.validation.slices, scores["validation"], 15,
      details["eval"], details["validation"])
  assert metrics == pytest.approx(calibration.row_metrics(
      sets, {n: curve.temperatures(scores[n], details[n])
             for n in ("test", "corrupted", "validation")}, 15), nan_ok=True)


def test_the_map_ceiling_recovers_the_map_the_corrupted_labels_were_drawn_from():
  """Labels drawn from softmax(logits / T(x)), T(x) = exp(0.2 + 0.5 z - 0.3 s): fitted on those
  labels, the map's form finds that T, with a lower cNLL than the map fitted on the validation
  shift and than the raw softmax."""
  rng = np.random.default_rng(4)
  sets = _sets(rng)
  counts = {name: len(getattr(sets, name).labels)
            for name in ("eval", "validation", "test", "corrupted")}
  scores = {name: rng.normal(1.0, 1.0, n) for name, n in counts.items()}
  details = {name: rng.normal(0.0, 1.5, n) for name, n in counts.items()}
  corrupted_count = 3000
  logits = rng.normal(0.0, 4.0, (corrupted_count, 5))
  scores["corrupted"], details["corrupted"] = (rng.normal(1.0, 1.0, corrupted_count),
                                               rng.normal(0.0, 1.5, corrupted_count))
  true_t = np.exp(0.2 + 0.5 * scores["corrupted"] - 0.3 * details["corrupted"])
  p = np.exp(maths.log_softmax(logits / true_t[:, None]))
  labels = np.array([rng.choice(5, p=row) for row in p])
  sets = calibration.ModelSets(sets.eval, sets.validation, sets.test,
                               _labelled(logits, labels, np.repeat(["x_1", "y_1", "z_1"], 1000)))
  name, label, ceiling = calibration.map_ceiling_row(sets, scores, details, 15)
  assert name.startswith("ceiling: the default map's form")
  a, b, c = map(float, re.fullmatch(r"exp\((\S+) \+ (\S+) z ([+-]\S+) s\)", label).groups())
  assert (a, b, c) == pytest.approx((0.2, 0.5, -0.3), abs=0.1)
  _, _, fitted_elsewhere = calibration.distance_detail_curve_row(sets, scores, details, 15)
  assert ceiling["cNLL"] < fitted_elsewhere["cNLL"]
  raw = calibration.row_metrics(sets, {n: 1.0 for n in ("test", "corrupted", "validation")}, 15)
  assert ceiling["cNLL"] < raw["cNLL"]


def _two_kinds_of_shift(rng, same_distance):
  """Corrupted slices x_1 (under-confident: true T = 0.5) and y_1 (over-confident: true T = 3),
  either at the same distance scores or x near and y far."""
  sets = _sets(rng)
  under, over = _sampled(rng, 400, 3.0, 0.5), _sampled(rng, 400, 3.0, 3.0)
  corrupted = _labelled(np.concatenate([under[0], over[0]]), np.concatenate([under[1], over[1]]),
                        np.repeat(["x_1", "y_1"], 400))
  sets = calibration.ModelSets(sets.eval, sets.validation, sets.test, corrupted)
  far = rng.uniform(2.0, 4.0, 800)
  z = far if same_distance else np.r_[rng.uniform(0.0, 1.0, 400), far[400:]]
  scores = {"eval": rng.uniform(0, 1, len(sets.eval.labels)), "test": rng.uniform(0, 1, 400),
            "validation": rng.uniform(1, 3, len(sets.validation.labels)), "corrupted": z}
  return sets, scores


def test_one_t_per_slice_separates_shifts_that_no_function_of_the_distance_can():
  """Two kinds of shift at the same distance ask for opposite temperatures: the per-slice
  ceiling fits each, the best function of z only their compromise. Apart, z serves both."""
  raw = {n: 1.0 for n in ("test", "corrupted", "validation")}
  sets, scores = _two_kinds_of_shift(np.random.default_rng(2), same_distance=True)
  _, _, by_slice = calibration.slice_ceiling_row(sets, 15)
  _, label, by_distance = calibration.distance_ceiling_row(sets, scores, 15)
  assert label.startswith("20 bins of z")
  assert by_slice["cNLL"] < by_distance["cNLL"] - 0.05
  assert by_slice["cNLL"] < calibration.row_metrics(sets, raw, 15)["cNLL"]
  for t in (0.5, 1.0, 3.0):  # No single T beats one per slice, on any set.
    scalar = calibration.row_metrics(sets, {n: t for n in raw}, 15)
    assert by_slice["cNLL"] <= scalar["cNLL"] and by_slice["test_nll"] <= scalar["test_nll"]

  sets, scores = _two_kinds_of_shift(np.random.default_rng(2), same_distance=False)
  _, _, by_slice = calibration.slice_ceiling_row(sets, 15)
  _, _, by_distance = calibration.distance_ceiling_row(sets, scores, 15)
  assert by_distance["cNLL"] == pytest.approx(by_slice["cNLL"], abs=0.03)


def test_the_ece_floor_is_what_a_calibrated_model_measures_and_shrinks_with_the_slices():
  """Labels drawn from the model's own softmax: its cECE is sampling noise alone, and the
  floor predicts it; ten times the images per slice, about a third of the floor."""
  rng = np.random.default_rng(3)
  def calibrated(per_slice):
    logits, labels = _sampled(rng, 20 * per_slice, 2.0, 1.0, classes=10)
    return _labelled(logits, labels, np.repeat([f"s_{i}" for i in range(20)], per_slice))
  small, large = calibrated(100), calibrated(1000)
  floor_small = calibration.calibrated_ece_floor(small, 15)
  measured = maths.slice_means(small.values, small.labels, small.slices)[1]
  assert 0.04 < floor_small < 0.15 and measured == pytest.approx(floor_small, rel=0.25)
  assert calibration.calibrated_ece_floor(large, 15) < 0.45 * floor_small


def test_a_familys_gap_is_the_mean_over_its_slices_of_confidence_minus_accuracy():
  # Snow at severities 1 (two images) and 5 (three): weather; contrast 2: digital; no noise or
  # blur slice. The slices differ in size, so a mean over images would differ.
  logits = np.log(np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8],
                            [0.8, 0.2], [0.8, 0.2]]))
  labels = np.array([0, 1, 0, 1, 0, 1, 1])
  slices = np.array(["snow_1", "snow_1", "snow_5", "snow_5", "snow_5", "contrast_2",
                     "contrast_2"])
  gaps = calibration.family_gaps(_labelled(logits, labels, slices))
  snow_1 = (0.9 + 0.9) / 2 - 1 / 2  # Confident on both, right on one.
  snow_5 = (0.6 + 0.7 + 0.8) / 3 - 2 / 3
  assert gaps["gap_weather"] == pytest.approx((snow_1 + snow_5) / 2)
  assert gaps["gap_digital"] == pytest.approx(0.8 - 0.0)
  assert np.isnan(gaps["gap_noise"]) and np.isnan(gaps["gap_blur"])
