"""bench/ensemble.py: weighted metrics, the grouped paired bootstrap and the NLL split."""
import numpy as np
import pytest

from bench import ensemble as bench
from bench.run_outputs import LabelledSet
from trainer_module.calibration import maths


def _scored(rng, count=300, classes=4, scale=3.0, slices=None):
  logits = rng.normal(0.0, scale, (count, classes))
  labels = rng.integers(0, classes, count)
  slices = np.full(count, "") if slices is None else slices
  labelled = LabelledSet(logits, labels, slices)
  return labelled, bench.scored(labelled, 15)


def test_unit_weights_give_the_temperature_modules_metrics():
  rng = np.random.default_rng(0)
  slices = np.repeat(["a_1", "a_2", "b_1"], 100)
  labelled, scored = _scored(rng, slices=slices)
  metrics = bench.weighted_metrics(scored, slices, np.ones((1, 300)), 15)
  nll, ece = maths.slice_means(labelled.values, labelled.labels, slices)
  assert metrics["nll"][0] == pytest.approx(nll)
  assert metrics["ece"][0] == pytest.approx(ece, abs=1e-6)
  assert metrics["accuracy"][0] == pytest.approx(np.mean(
      [np.mean(labelled.values[slices == s].argmax(1) == labelled.labels[slices == s])
       for s in ("a_1", "a_2", "b_1")]))


def test_integer_weights_are_the_metrics_of_the_examples_repeated():
  rng = np.random.default_rng(1)
  labelled, scored = _scored(rng, count=50)
  counts = rng.integers(0, 4, 50)
  repeated = np.repeat(np.arange(50), counts)
  weighted = bench.weighted_metrics(scored, labelled.slices, counts[None].astype(float), 15)
  assert weighted["nll"][0] == pytest.approx(
      maths.nll(labelled.values[repeated], labelled.labels[repeated]))
  assert weighted["ece"][0] == pytest.approx(
      maths.ece(labelled.values[repeated], labelled.labels[repeated]), abs=1e-6)


def test_bootstrap_weights_draw_whole_groups_and_are_seeded():
  groups = np.array(["k1", "k2", "k3", "k1", "k2", "k3"])  # Two slices of three images.
  weights = bench.bootstrap_weights(groups, 500, seed=7)
  assert weights.shape == (500, 6)
  assert np.array_equal(weights[:, :3], weights[:, 3:])  # An image's slices go together.
  assert np.all(weights[:, :3].sum(axis=1) == 3)  # As many groups drawn as there are.
  assert np.array_equal(weights, bench.bootstrap_weights(groups, 500, seed=7))
  assert not np.array_equal(weights, bench.bootstrap_weights(groups, 500, seed=8))


def test_a_model_against_itself_differs_by_exactly_zero():
  rng = np.random.default_rng(2)
  labelled, scored = _scored(rng)
  difference = bench.paired_difference(scored, scored, labelled.slices,
                                       np.arange(300).astype(str), 15, 200, 0)
  assert set(difference) == {"accuracy", "nll", "ece"}
  assert all(value == (0.0, 0.0, 0.0) for value in difference.values())


def test_a_model_better_on_every_example_has_an_interval_below_zero_and_a_tied_one_spans_it():
  rng = np.random.default_rng(3)
  labelled, scored = _scored(rng)
  softer = bench.scored(LabelledSet(labelled.values * 0.5, labelled.labels, labelled.slices),
                        15)
  groups = np.arange(300).astype(str)
  value, low, high = bench.paired_difference(softer, scored, labelled.slices, groups, 15, 500,
                                             0)["nll"]
  assert value < 0 and low < value < high < 0  # Random labels: the softer model's NLL is lower.
  tied = bench.paired_difference(scored, scored, labelled.slices, groups, 15, 500, 0)["accuracy"]
  assert tied == (0.0, 0.0, 0.0)
  value, low, high = bench.paired_difference(softer, scored, labelled.slices, groups, 15, 500,
                                             0)["accuracy"]
  assert value == 0.0 and low == high == 0.0  # Same argmax: accuracy cannot differ.


def test_the_nll_split_adds_up_and_counts_the_errors():
  logits = np.array([[3.0, 0.0], [0.0, 3.0], [2.0, 0.0]])
  labels = np.array([0, 1, 1])
  scored = bench.scored(LabelledSet(logits, labels, np.full(3, "")), 15)
  right, wrong, count = bench.nll_split(scored)
  assert count == 1
  assert right + wrong == pytest.approx(maths.nll(logits, labels))
  assert wrong == pytest.approx(-maths.log_softmax(logits)[2, 1] / 3)
