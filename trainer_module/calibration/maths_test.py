"""The temperature maths: the fit finds the NLL minimum, deterministically, and fails loudly; the
bounds under shift hold per slice."""
import numpy as np
import pytest
from scipy import special

from test_support.calibration_data import overconfident, miscalibrated, one_slice
from trainer_module.calibration import maths


def test_the_fit_is_the_nll_minimum_and_recovers_the_true_temperature():
  logits, labels = overconfident(np.random.default_rng(0))
  fitted = maths.fit_temperature(logits, labels)
  grid = np.linspace(0.5, 5.0, 901)
  best = grid[np.argmin([maths.nll(logits, labels, t) for t in grid])]
  assert fitted == pytest.approx(best, abs=0.01)
  assert fitted == pytest.approx(2.0, rel=0.1)
  assert maths.nll(logits, labels, fitted) < maths.nll(logits, labels)


def test_the_fit_is_deterministic():
  logits, labels = overconfident(np.random.default_rng(1), count=500)
  assert maths.fit_temperature(logits, labels) == maths.fit_temperature(
      logits.copy(), labels.copy())


def test_a_weighted_fit_minimises_the_weighted_mean_nll():
  """Half the examples ask for sharpening, half for softening: the weights decide the T."""
  rng = np.random.default_rng(3)
  sharp, soft = miscalibrated(rng, 0.5, count=600), miscalibrated(rng, 3.0, count=600)
  logits, labels = np.concatenate([sharp[0], soft[0]]), np.concatenate([sharp[1], soft[1]])
  weights = np.repeat([3.0, 1.0], 600)

  def weighted_nll(temperature):
    scaled = logits / temperature
    per_example = special.logsumexp(scaled, axis=1) - scaled[np.arange(len(labels)), labels]
    return np.sum(weights * per_example) / np.sum(weights)

  grid = np.linspace(0.3, 3.0, 541)
  fitted = maths.fit_temperature(logits, labels, weights)
  assert fitted == pytest.approx(grid[np.argmin([weighted_nll(t) for t in grid])], abs=0.005)
  assert abs(maths.fit_temperature(logits, labels) - fitted) > 0.1, "the weights matter"


def test_slice_weights_give_every_slice_the_same_total_weight():
  np.testing.assert_allclose(maths.slice_weights(np.array(["a", "a", "b"])), [0.25, 0.25, 0.5])
  slices = np.repeat(["blur_1", "blur_5", "noise_3"], [5, 1, 14])
  values = np.random.default_rng(2).normal(size=20)
  each_slice = [values[slices == name].mean() for name in ("blur_1", "blur_5", "noise_3")]
  assert np.sum(maths.slice_weights(slices) * values) == pytest.approx(np.mean(each_slice))


def test_separable_data_sharpens_to_the_lower_bound():
  logits = np.eye(3)[[0, 1, 2, 0]] * 10.0
  assert maths.fit_temperature(logits, np.array([0, 1, 2, 0])) == \
      maths.MIN_TEMPERATURE


@pytest.mark.parametrize("logits, labels, message", [
    (np.zeros((0, 10)), np.zeros(0, np.int64), "No eval examples"),
    (np.array([[0.0, np.nan], [1.0, 0.0]]), np.array([0, 1]), "1 of 2 eval examples have "
     "non-finite logits"),
    (np.array([[0.0, np.inf]]), np.array([0]), "non-finite"),
    (np.zeros((2, 3)), np.array([0, 3]), r"Labels must be in \[0, 3\)"),
    (np.zeros((2, 3)), np.array([0]), "2 logits but 1 labels"),
])
def test_a_fit_that_cannot_work_fails_loudly(logits, labels, message):
  with pytest.raises(maths.TemperatureFitError, match=message):
    maths.fit_temperature(logits, labels)


def test_validation_shift_selection_never_worsens_the_corrupted_nll_where_a_clean_fit_does():
  """The default model's case: under-confident on clean images and under mild corruptions,
  over-confident under strong ones. The validation slices and the (never seen) test
  corruptions share that behaviour; on average the validation slices welcome sharpening."""
  rng = np.random.default_rng(4)
  clean = miscalibrated(rng, 0.5)
  mild, strong = miscalibrated(rng, 0.3, count=1500), miscalibrated(rng, 1.3, count=1500)
  validation = (np.concatenate([mild[0], strong[0]]), np.concatenate([mild[1], strong[1]]),
                np.repeat(["speckle_noise_1", "speckle_noise_5"], 1500))
  corrupted = miscalibrated(rng, 2.0)
  clean_fit = maths.fit_temperature(*clean)
  assert maths.nll(*corrupted, clean_fit) > maths.nll(*corrupted) + 0.1
  assert maths.ece(*corrupted, clean_fit) > maths.ece(*corrupted)
  pooled_fit = maths.fit_temperature(*validation[:2])
  assert pooled_fit < 1.0, "the validation set as a whole would allow sharpening"
  chosen = maths.select_temperature_under_shift(*clean, *validation)
  assert chosen == 1.0, "the strong slice forbids it"
  assert maths.nll(*corrupted, chosen) <= maths.nll(*corrupted)
  assert maths.ece(*corrupted, chosen) <= maths.ece(*corrupted)


def test_validation_shift_selection_is_the_clean_fit_when_every_slice_allows_it():
  rng = np.random.default_rng(5)
  clean = miscalibrated(rng, 0.6)
  validation = one_slice(miscalibrated(rng, 0.5))
  chosen = maths.select_temperature_under_shift(*clean, *validation)
  assert chosen == pytest.approx(maths.fit_temperature(*clean), rel=1e-9)
  assert maths.nll(*clean, chosen) < maths.nll(*clean) - 0.01
  assert maths.ece(*clean, chosen) < maths.ece(*clean)


def test_validation_shift_selection_softens_an_overconfident_model_as_every_slice_wants():
  """The usual case without AugMix: over-confident everywhere; shift asks for softening too."""
  rng = np.random.default_rng(11)
  clean = miscalibrated(rng, 1.5)
  mild, strong = miscalibrated(rng, 1.6, count=1500), miscalibrated(rng, 3.0, count=1500)
  validation = (np.concatenate([mild[0], strong[0]]), np.concatenate([mild[1], strong[1]]),
                np.repeat(["blur_1", "blur_5"], 1500))
  chosen = maths.select_temperature_under_shift(*clean, *validation)
  assert chosen == pytest.approx(maths.fit_temperature(*clean), rel=1e-9)
  assert chosen > 1.3


def test_validation_shift_selection_stops_at_the_raw_nll_of_the_shifted_set():
  rng = np.random.default_rng(0)
  clean, validation = miscalibrated(rng, 0.25), one_slice(miscalibrated(rng, 0.85))
  chosen = maths.select_temperature_under_shift(*clean, *validation)
  assert maths.fit_temperature(*clean) < chosen < maths.fit_temperature(
      *validation[:2])
  assert maths.nll(*validation[:2], chosen) == pytest.approx(
      maths.nll(*validation[:2]), abs=1e-6)
  assert maths.nll(*clean, chosen) < maths.nll(*clean)


def test_validation_shift_selection_backs_off_towards_one_where_the_shifted_ece_would_rise():
  """Here the NLL bound alone would allow T = 0.751, at which the shifted ECE is above raw."""
  rng = np.random.default_rng(1)
  clean, validation = miscalibrated(rng, 0.25), one_slice(miscalibrated(rng, 0.9))
  low, high = maths.no_worse_than_raw(*validation[:2])  # pylint: disable=protected-access
  nll_only = float(np.exp(-np.clip(np.log(1.0 / maths.fit_temperature(*clean)), low, high)))
  assert maths.ece(*validation[:2], nll_only) > maths.ece(*validation[:2])
  chosen = maths.select_temperature_under_shift(*clean, *validation)
  assert nll_only < chosen < 1.0
  assert maths.ece(*validation[:2], chosen) <= maths.ece(*validation[:2])
  assert maths.nll(*validation[:2], chosen) <= maths.nll(*validation[:2])
  assert maths.nll(*clean, chosen) < maths.nll(*clean)


def test_slice_means_are_means_over_slices_not_over_examples():
  logits = np.log(np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]]))
  labels, slices = np.array([0, 1, 1]), np.array(["a", "a", "b"])
  mean_nll, mean_ece = maths.slice_means(logits, labels, slices, num_bins=10)
  assert mean_nll == pytest.approx(((-np.log(0.9) - np.log(0.4)) / 2 - np.log(0.7)) / 2)
  assert mean_ece == pytest.approx(((0.1 + 0.6) / 2 + 0.3) / 2)


def test_ece_is_the_trainers_top_label_ece():
  logits = np.log(np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]]))
  labels = np.array([0, 1, 1, 1])
  # Bins (of 10): 0.9 right; 0.6 wrong; 0.7 right; 0.8 right: |1-0.9|+|0-0.6|+|1-0.7|+|1-0.8|.
  assert maths.ece(logits, labels, num_bins=10) == pytest.approx(1.2 / 4)
