"""temperature_fit=clean_and_augmix: never worse than raw on the clean images or their AugMix
views."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from testing.calibration_data import miscalibrated
from trainer_module.calibration import clean_and_augmix, maths, registry
from trainer_module.calibration.method import HeldOut


def test_shift_aware_selection_never_worsens_the_corrupted_nll_where_a_clean_fit_does():
  """Under-confident on clean images (a clean fit sharpens), over-confident under shift: the
  AugMix views and the corrupted set come from the same shifted behaviour."""
  rng = np.random.default_rng(4)
  clean = miscalibrated(rng, 0.5)
  augmented = miscalibrated(rng, 3.0)
  corrupted = miscalibrated(rng, 3.0)
  clean_fit = maths.fit_temperature(*clean)
  assert clean_fit < 0.7
  assert maths.nll(*corrupted, clean_fit) > maths.nll(*corrupted) + 0.1, \
      "the clean fit makes the corrupted set worse"
  chosen = clean_and_augmix.select_temperature(*clean, *augmented)
  assert maths.nll(*corrupted, chosen) <= maths.nll(*corrupted)
  assert maths.nll(*clean, chosen) <= maths.nll(*clean)
  assert maths.nll(*augmented, chosen) <= maths.nll(*augmented)


def test_selection_improves_both_sets_when_they_agree():
  """Fewer AugMix views than clean images: each set weighs the same, not each example."""
  rng = np.random.default_rng(5)
  clean, augmented = miscalibrated(rng, 0.6), miscalibrated(rng, 0.75, count=500)
  chosen = clean_and_augmix.select_temperature(*clean, *augmented)
  assert chosen < 0.9
  assert maths.nll(*clean, chosen) < maths.nll(*clean) - 0.01
  assert maths.nll(*augmented, chosen) < maths.nll(*augmented) - 0.01
  # It is the minimum of the mean of the two sets' NLLs within the allowed range, here
  # unconstrained; the minimum of the pooled examples' NLL lies elsewhere.
  grid = np.linspace(0.3, 1.2, 901)
  mean_nll = [maths.nll(*clean, t) + maths.nll(*augmented, t) for t in grid]
  assert chosen == pytest.approx(grid[int(np.argmin(mean_nll))], abs=0.01)
  pooled = [np.concatenate(pair) for pair in zip(clean, augmented)]
  pooled_nll = [maths.nll(*pooled, t) for t in grid]
  assert abs(chosen - grid[int(np.argmin(pooled_nll))]) > 0.03


def test_selection_stops_where_the_shifted_nll_would_exceed_the_raw_softmax():
  rng = np.random.default_rng(6)
  clean, augmented = miscalibrated(rng, 0.25), miscalibrated(rng, 0.85)
  chosen = clean_and_augmix.select_temperature(*clean, *augmented)
  assert chosen < maths.fit_temperature(*augmented), "sharper than the shift alone wants"
  assert maths.nll(*augmented, chosen) == pytest.approx(maths.nll(*augmented),
                                                        abs=1e-6), "... up to its raw NLL"
  assert maths.nll(*clean, chosen) < maths.nll(*clean)
  assert chosen > maths.fit_temperature(*clean)


def test_calibrate_with_augmented_batches_records_both_fits():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,))])
  rng = np.random.default_rng(7)
  images = rng.normal(size=(60, 3)).astype(np.float32)
  labels = np.arange(60) % 4
  batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)
  shifted = batches.map(lambda x, y: (x * 3.0, y))
  info = registry.get("clean_and_augmix").fit(model, HeldOut(batches, augmented_batches=shifted))
  logits, augmented_logits = model(images).numpy(), model(images * 3.0).numpy()
  assert info["temperature_fit"] == "clean_and_augmix"
  temperature = info["temperature"]
  assert temperature == clean_and_augmix.select_temperature(logits, labels, augmented_logits,
                                                            labels)
  assert info["augmented_nll_after"] == pytest.approx(maths.nll(augmented_logits, labels,
                                                                temperature))
  assert info["augmented_nll_after"] < info["augmented_nll_before"]
  assert info["eval_nll_after"] == pytest.approx(maths.nll(logits, labels, temperature))
  assert info["eval_nll_after"] < info["eval_nll_before"]
