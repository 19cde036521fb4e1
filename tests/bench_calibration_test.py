"""bench/calibration.py: the table it prints and the shift-dependent map it fits."""
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


def test_the_shift_map_sharpens_near_the_clean_data_and_softens_far_from_it():
  rng = np.random.default_rng(1)
  sets = _sets(rng)
  clean_z = rng.normal(0.0, 1.0, len(sets.eval.labels))
  shifted_z = rng.normal(6.0, 0.5, len(sets.validation.labels))
  log_t, slope = calibration.fit_shift_map(sets.eval, clean_z, sets.validation, shifted_z, 15)
  assert np.exp(log_t) < 0.8 and slope > 0
  clean_t = calibration.shift_temperatures(clean_z, log_t, slope)
  assert (temperature.nll(calibration.scaled(sets.eval, clean_t).values, sets.eval.labels) <
          temperature.nll(sets.eval.values, sets.eval.labels) - 0.05)
  moved = calibration.scaled(sets.validation, calibration.shift_temperatures(shifted_z, log_t,
                                                                             slope))
  for name in np.unique(sets.validation.slices):
    mask = sets.validation.slices == name
    assert temperature.nll(moved.values[mask], moved.labels[mask]) <= temperature.nll(
        sets.validation.values[mask], sets.validation.labels[mask])


def test_a_score_that_does_not_tell_shift_apart_cannot_sharpen_past_the_shifted_bound():
  sets = _sets(np.random.default_rng(2))
  z = np.zeros(len(sets.eval.labels)), np.zeros(len(sets.validation.labels))
  log_t, slope = calibration.fit_shift_map(sets.eval, z[0], sets.validation, z[1], 15)
  # With z = 0 the map is one T; the shifted slices want T > 1, so it cannot go below 1.
  assert np.exp(log_t) >= 1.0


def test_scores_are_standardised_on_the_clean_eval_set():
  z = calibration.standardised({"eval": np.array([1.0, 3.0]), "test": np.array([5.0])})
  assert z["eval"] == pytest.approx([-1.0, 1.0])
  assert z["test"] == pytest.approx([3.0])
