"""Temperature scaling: the fit finds the NLL minimum, deterministically, and fails loudly."""
import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from trainer_module import reference_corruptions
from trainer_module.calibration import (clean_and_augmix, distance_curve, maths, model_outputs,
                                        record, registry, serving)
from trainer_module.calibration.distances import (class_statistics, distance_scores,
                                                  mahalanobis_distance, support_from_features,
                                                  within_support)
from trainer_module.calibration.inputs import (VALIDATION_CORRUPTIONS, augmented_eval_batches,
                                               channel_statistics, validation_corrupted_set)
from trainer_module.calibration.method import HeldOut


def _overconfident(rng, count=4000, true_temperature=2.0, classes=10):
  """Logits whose labels are drawn from softmax(logits / true_temperature)."""
  logits = rng.normal(0.0, 4.0, (count, classes))
  p = np.exp(logits / true_temperature)
  p /= p.sum(axis=1, keepdims=True)
  labels = np.array([rng.choice(classes, p=row) for row in p])
  return logits, labels


def test_the_fit_is_the_nll_minimum_and_recovers_the_true_temperature():
  logits, labels = _overconfident(np.random.default_rng(0))
  fitted = maths.fit_temperature(logits, labels)
  grid = np.linspace(0.5, 5.0, 901)
  best = grid[np.argmin([maths.nll(logits, labels, t) for t in grid])]
  assert fitted == pytest.approx(best, abs=0.01)
  assert fitted == pytest.approx(2.0, rel=0.1)
  assert maths.nll(logits, labels, fitted) < maths.nll(logits, labels)


def test_the_fit_is_deterministic():
  logits, labels = _overconfident(np.random.default_rng(1), count=500)
  assert maths.fit_temperature(logits, labels) == maths.fit_temperature(
      logits.copy(), labels.copy())


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


def test_calibrate_reads_the_models_logits_and_an_empty_eval_split_fails(tmp_path):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,))])
  images = np.random.default_rng(2).normal(size=(50, 3)).astype(np.float32)
  labels = np.arange(50) % 4
  batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)
  info = registry.get("clean").fit(model, HeldOut(batches))
  logits = model(images).numpy()
  assert info["eval_examples"] == 50
  assert info["temperature"] == maths.fit_temperature(logits, labels)
  assert info["eval_nll_after"] <= info["eval_nll_before"]
  record.write_calibration_info(str(tmp_path), info)
  assert record.read_calibration_info(str(tmp_path)) == info
  with pytest.raises(maths.TemperatureFitError, match="eval split is empty"):
    registry.get("clean").fit(model, HeldOut(batches.take(0)))


def test_padding_rows_of_weighted_batches_are_left_out():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,))])
  images = np.random.default_rng(3).normal(size=(10, 3)).astype(np.float32)
  labels = np.array([0, 1, 2, 3, 0, 1, 2, -1, -1, -1])  # The last three are padding.
  weights = np.array([1.0] * 7 + [0.0] * 3, np.float32)
  batches = tf.data.Dataset.from_tensor_slices((images, labels, weights)).batch(4)
  logits, kept_labels = model_outputs.model_logits(model, batches)
  np.testing.assert_array_equal(kept_labels, labels[:7])
  np.testing.assert_allclose(logits, model(images[:7]).numpy(), rtol=1e-6)
  with pytest.raises(maths.TemperatureFitError, match="eval split is empty"):
    model_outputs.model_logits(model, tf.data.Dataset.from_tensor_slices(
        (images[7:], labels[7:], weights[7:])).batch(4))


def _miscalibrated(rng, true_temperature, count=3000, classes=10):
  """Logits of a model whose confidence is off by `true_temperature` (< 1: under-confident)."""
  return _overconfident(rng, count, true_temperature, classes)


def test_shift_aware_selection_never_worsens_the_corrupted_nll_where_a_clean_fit_does():
  """Under-confident on clean images (a clean fit sharpens), over-confident under shift: the
  AugMix views and the corrupted set come from the same shifted behaviour."""
  rng = np.random.default_rng(4)
  clean = _miscalibrated(rng, 0.5)
  augmented = _miscalibrated(rng, 3.0)
  corrupted = _miscalibrated(rng, 3.0)
  clean_fit = maths.fit_temperature(*clean)
  assert clean_fit < 0.7
  assert maths.nll(*corrupted, clean_fit) > maths.nll(*corrupted) + 0.1, \
      "the clean fit makes the corrupted set worse"
  chosen = clean_and_augmix.select_temperature(*clean, *augmented)
  assert maths.nll(*corrupted, chosen) <= maths.nll(*corrupted)
  assert maths.nll(*clean, chosen) <= maths.nll(*clean)
  assert maths.nll(*augmented, chosen) <= maths.nll(*augmented)


def test_selection_improves_both_sets_when_they_agree():
  rng = np.random.default_rng(5)
  clean, augmented = _miscalibrated(rng, 0.6), _miscalibrated(rng, 0.8)
  chosen = clean_and_augmix.select_temperature(*clean, *augmented)
  assert chosen < 0.9
  assert maths.nll(*clean, chosen) < maths.nll(*clean) - 0.01
  assert maths.nll(*augmented, chosen) < maths.nll(*augmented) - 0.01
  # It is the minimum of the mean NLL within the allowed range, here unconstrained.
  grid = np.linspace(0.3, 1.2, 901)
  mean_nll = [maths.nll(*clean, t) + maths.nll(*augmented, t) for t in grid]
  assert chosen == pytest.approx(grid[int(np.argmin(mean_nll))], abs=0.01)


def test_selection_stops_where_the_shifted_nll_would_exceed_the_raw_softmax():
  rng = np.random.default_rng(6)
  clean, augmented = _miscalibrated(rng, 0.25), _miscalibrated(rng, 0.85)
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
  assert info["temperature_fit"] == "clean_and_augmix"
  assert info["temperature"] == clean_and_augmix.select_temperature(
      model(images).numpy(), labels, model(images * 3.0).numpy(), labels)
  assert info["augmented_nll_after"] <= info["augmented_nll_before"]
  assert info["eval_nll_after"] <= info["eval_nll_before"]


def test_augmented_eval_batches_are_augmix_views_normalised_like_the_images_and_repeatable():
  from trainer_module import augmix
  rng = np.random.default_rng(8)
  mean, std = np.array([0.2, 0.3, 0.4], np.float32), np.array([0.25, 0.2, 0.3], np.float32)
  images01 = rng.integers(0, 256, (6, 32, 32, 3)).astype(np.float32) / 255.0
  images = (images01 - mean) / std
  labels, weights = np.arange(6), np.ones(6, np.float32)
  batches = tf.data.Dataset.from_tensor_slices((images, labels, weights)).batch(4)
  views = augmented_eval_batches(batches, mean, std, 42, augmix.AugMixParams())
  first, again = list(views), list(views)
  for (view, view_labels, view_weights), batch, (repeat, *_) in zip(first, batches, again):
    assert view.shape == batch[0].shape
    np.testing.assert_array_equal(view_labels, batch[1])
    np.testing.assert_array_equal(view_weights, batch[2])
    np.testing.assert_array_equal(view, repeat)
    pixels01 = view.numpy() * std + mean
    assert pixels01.min() >= -1e-5 and pixels01.max() <= 1 + 1e-5
  assert not np.allclose(first[0][0], images[:4], atol=1e-3), "the views are augmented"


def test_channel_statistics_read_back_transforms_mean_and_std(tmp_path):
  """From a real transform graph (TF1-traced, as Transform writes it), in eager mode."""
  import tensorflow_transform as tft
  from testing.transform_runs import raw_digit_examples, run_transform
  from trainer_module.config import TrainerConfig
  from trainer_module.preprocessing import decode_images
  raw = raw_digit_examples(8)
  _, transform_dir = run_transform(raw, TrainerConfig().transform_options(), str(tmp_path),
                                   ["--direct_running_mode=in_memory"])
  mean, std = channel_statistics(tft.TFTransformOutput(transform_dir))
  pixels = decode_images(tf.constant([r["image"] for r in raw])).numpy().reshape(-1, 3) / 255.0
  np.testing.assert_allclose(mean.numpy(), pixels.mean(axis=0), atol=1e-5)
  np.testing.assert_allclose(std.numpy(), pixels.std(axis=0), rtol=1e-4)


def _one_slice(data):
  return (*data, np.full(len(data[1]), "all"))


def test_validation_shift_selection_never_worsens_the_corrupted_nll_where_a_clean_fit_does():
  """The default model's case: under-confident on clean images and under mild corruptions,
  over-confident under strong ones. The validation slices and the (never seen) test
  corruptions share that behaviour; on average the validation slices welcome sharpening."""
  rng = np.random.default_rng(4)
  clean = _miscalibrated(rng, 0.5)
  mild, strong = _miscalibrated(rng, 0.3, count=1500), _miscalibrated(rng, 1.3, count=1500)
  validation = (np.concatenate([mild[0], strong[0]]), np.concatenate([mild[1], strong[1]]),
                np.repeat(["speckle_noise_1", "speckle_noise_5"], 1500))
  corrupted = _miscalibrated(rng, 2.0)
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
  clean = _miscalibrated(rng, 0.6)
  validation = _one_slice(_miscalibrated(rng, 0.5))
  chosen = maths.select_temperature_under_shift(*clean, *validation)
  assert chosen == pytest.approx(maths.fit_temperature(*clean), rel=1e-9)
  assert maths.nll(*clean, chosen) < maths.nll(*clean) - 0.01
  assert maths.ece(*clean, chosen) < maths.ece(*clean)


def test_validation_shift_selection_softens_an_overconfident_model_as_every_slice_wants():
  """The usual case without AugMix: over-confident everywhere; shift asks for softening too."""
  rng = np.random.default_rng(11)
  clean = _miscalibrated(rng, 1.5)
  mild, strong = _miscalibrated(rng, 1.6, count=1500), _miscalibrated(rng, 3.0, count=1500)
  validation = (np.concatenate([mild[0], strong[0]]), np.concatenate([mild[1], strong[1]]),
                np.repeat(["blur_1", "blur_5"], 1500))
  chosen = maths.select_temperature_under_shift(*clean, *validation)
  assert chosen == pytest.approx(maths.fit_temperature(*clean), rel=1e-9)
  assert chosen > 1.3


def test_validation_shift_selection_stops_at_the_raw_nll_of_the_shifted_set():
  rng = np.random.default_rng(0)
  clean, validation = _miscalibrated(rng, 0.25), _one_slice(_miscalibrated(rng, 0.85))
  chosen = maths.select_temperature_under_shift(*clean, *validation)
  assert maths.fit_temperature(*clean) < chosen < maths.fit_temperature(
      *validation[:2])
  assert maths.nll(*validation[:2], chosen) == pytest.approx(
      maths.nll(*validation[:2]), abs=1e-6)
  assert maths.nll(*clean, chosen) < maths.nll(*clean)


def test_validation_shift_selection_backs_off_towards_one_where_the_shifted_ece_would_rise():
  """Here the NLL bound alone would allow T = 0.751, at which the shifted ECE is above raw."""
  rng = np.random.default_rng(1)
  clean, validation = _miscalibrated(rng, 0.25), _one_slice(_miscalibrated(rng, 0.9))
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


def _normalised_batches(rng, count, batch_size, mean, std):
  images01 = rng.integers(0, 256, (count, 32, 32, 3)).astype(np.float32) / 255.0
  labels = np.arange(count) % 4
  weights = np.ones(count, np.float32)
  return ((images01 - mean) / std, labels, weights), tf.data.Dataset.from_tensor_slices(
      ((images01 - mean) / std, labels, weights)).batch(batch_size)


def test_validation_corrupted_batches_are_every_validation_slice_repeatable_in_any_order():
  rng = np.random.default_rng(9)
  mean, std = np.array([0.2, 0.3, 0.4], np.float32), np.array([0.25, 0.2, 0.3], np.float32)
  (images, labels, weights), batches = _normalised_batches(rng, 7, 3, mean, std)
  corrupted, slices = validation_corrupted_set(batches, mean, std, 2, 8)
  reversed_batches = tf.data.Dataset.from_tensor_slices(
      (images[::-1], labels[::-1], weights[::-1])).batch(4)
  again, _ = validation_corrupted_set(reversed_batches, mean, std, 2, 8)
  assert list(slices[:4]) == ["speckle_noise_1"] * 2 + ["speckle_noise_2"] * 2
  assert len(set(slices)) == 20 and all(list(slices).count(name) == 2 for name in set(slices))
  first_images = np.concatenate([b[0].numpy() for b in corrupted])
  first_labels = np.concatenate([b[1].numpy() for b in corrupted])
  assert len(first_labels) == 2 * len(VALIDATION_CORRUPTIONS) * 5
  np.testing.assert_array_equal(first_images, np.concatenate([b[0].numpy() for b in again]))
  np.testing.assert_array_equal(first_labels, np.concatenate([b[1].numpy() for b in again]))
  pixels01 = first_images * std + mean
  assert pixels01.min() >= -1e-5 and pixels01.max() <= 1 + 1e-5
  # Two eval images, the same two in every slice, each its own label.
  slices = first_images.reshape(len(VALIDATION_CORRUPTIONS) * 5, 2, 32, 32, 3)
  assert not np.allclose(slices[0], slices[-1], atol=1e-3), "different corruptions differ"
  assert set(first_labels.reshape(-1, 2)[0]) <= set(labels)
  assert not set(VALIDATION_CORRUPTIONS) & set(
      reference_corruptions.BENCHMARK_CORRUPTIONS), "no evaluated corruption tunes T"


def test_validation_corrupted_batches_of_an_empty_eval_split_fail():
  mean, std = np.zeros(3, np.float32), np.ones(3, np.float32)
  empty = tf.data.Dataset.from_tensor_slices((np.zeros((0, 32, 32, 3), np.float32),
                                              np.zeros(0, np.int64))).batch(4)
  with pytest.raises(maths.TemperatureFitError, match="eval split is empty"):
    validation_corrupted_set(empty, mean, std, 2, 8)


def test_calibrate_with_validation_corruptions_records_the_shift_before_and_after():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.layers.Flatten(input_shape=(32, 32, 3)),
                            keras.layers.Dense(4)])
  rng = np.random.default_rng(10)
  mean, std = np.array([0.5, 0.5, 0.5], np.float32), np.array([0.25, 0.25, 0.25], np.float32)
  (images, labels, _), batches = _normalised_batches(rng, 12, 5, mean, std)
  corrupted = validation_corrupted_set(batches, mean, std, 3, 16)
  info = registry.get("validation_corruptions").fit(model, HeldOut(batches, corrupted))
  shifted_logits, shifted_labels = model_outputs.model_logits(model, corrupted.batches)
  assert info["temperature_fit"] == "validation_corruptions"
  assert info["validation_examples"] == 3 * 20
  assert info["temperature"] == maths.select_temperature_under_shift(
      model(images).numpy(), labels, shifted_logits, shifted_labels, corrupted.slices)
  assert info["validation_nll_after"] <= info["validation_nll_before"]
  assert info["validation_ece_after"] <= info["validation_ece_before"]
  assert info["eval_nll_after"] <= info["eval_nll_before"]
  with pytest.raises(ValueError, match="does not read the AugMix views"):
    registry.get("validation_corruptions").fit(model, HeldOut(batches, corrupted, batches))


def test_in_support_keeps_the_clean_fit_where_the_slice_that_forbids_it_lies_outside():
  """The default model's case again: the strong slice that forbids sharpening is far from the
  training data, so the T that applies only within the support is the clean fit; the mild
  slice inside still bounds it, and far-off inputs keep the raw softmax."""
  rng = np.random.default_rng(4)
  clean = _miscalibrated(rng, 0.5)
  mild, strong = _miscalibrated(rng, 0.4, count=1500), _miscalibrated(rng, 1.3, count=1500)
  validation = (np.concatenate([mild[0], strong[0]]), np.concatenate([mild[1], strong[1]]),
                np.repeat(["speckle_noise_1", "speckle_noise_5"], 1500))
  inside = np.repeat([True, False], 1500)
  assert maths.select_temperature_under_shift(*clean, *validation) == 1.0
  chosen = maths.select_temperature_under_shift(*clean, *validation,
                                                      shifted_applies=inside)
  assert chosen == pytest.approx(maths.fit_temperature(*clean), rel=1e-9)
  assert maths.nll(*clean, chosen) < maths.nll(*clean) - 0.05
  served = validation[0] / np.where(inside, chosen, 1.0)[:, np.newaxis]
  for name in ("speckle_noise_1", "speckle_noise_5"):
    mask = validation[2] == name
    assert maths.nll(served[mask], validation[1][mask]) <= maths.nll(
        validation[0][mask], validation[1][mask])
  # Had the strong slice been inside, it would have bounded T as before.
  assert maths.select_temperature_under_shift(
      *clean, *validation, shifted_applies=np.ones(3000, bool)) == 1.0


def test_the_mahalanobis_distance_is_zero_at_a_class_mean_and_blind_to_linear_rescaling():
  rng = np.random.default_rng(12)
  labels = np.arange(600) % 3
  features = rng.normal(size=(600, 4)) + labels[:, np.newaxis] * 3.0
  means, precision = class_statistics(features, labels)
  assert mahalanobis_distance(means, means, precision) == pytest.approx(0.0,
                                                                                   abs=1e-6)
  mixing = rng.normal(size=(4, 4)) + 4 * np.eye(4)
  queries = rng.normal(size=(20, 4)) * 5
  moved_means, moved_precision = class_statistics(features @ mixing, labels)
  np.testing.assert_allclose(
      mahalanobis_distance(queries @ mixing, moved_means, moved_precision),
      mahalanobis_distance(queries, means, precision), rtol=1e-4)
  far = mahalanobis_distance(means + 100.0, means, precision)
  assert np.all(far > mahalanobis_distance(features, means, precision).max())


def test_the_support_holds_every_eval_image_and_serving_computes_the_same_temperatures():
  rng = np.random.default_rng(13)
  labels = np.arange(300) % 3
  train = rng.normal(size=(300, 5)) + labels[:, np.newaxis]
  eval_features = rng.normal(size=(40, 5))
  support = support_from_features(train, labels, eval_features)
  distances = mahalanobis_distance(eval_features, support.class_means,
                                               support.precision)
  assert np.all(distances <= support.radius)
  queries = np.concatenate([eval_features, rng.normal(size=(40, 5)) * 1.5]).astype(np.float32)
  served = serving.support_temperatures(tf.constant(queries), support, 0.4).numpy()
  inside = mahalanobis_distance(queries, support.class_means,
                                            support.precision) <= support.radius
  assert 0 < inside[40:].sum() < 40
  np.testing.assert_array_equal(served, np.where(inside, 0.4, 1.0).astype(np.float32))


def test_an_ensembles_support_is_the_union_of_its_members_each_in_its_own_columns():
  rng = np.random.default_rng(15)
  labels = np.arange(300) % 3
  # Two members' features side by side: 5 columns, then 4.
  member_a = rng.normal(size=(300, 5)) + labels[:, np.newaxis]
  member_b = rng.normal(size=(300, 4)) - labels[:, np.newaxis]
  eval_a, eval_b = rng.normal(size=(40, 5)), rng.normal(size=(40, 4))
  support = (support_from_features(member_a, labels, eval_a),
             support_from_features(member_b, labels, eval_b, start=5))
  a, b = support
  far_a, far_b = a.class_means[:1] + 100.0, b.class_means[:1] + 100.0
  near_a, near_b = eval_a[:1], eval_b[:1]
  queries = np.concatenate([np.concatenate(pair, axis=1) for pair in
                            ((near_a, near_b), (near_a, far_b), (far_a, near_b),
                             (far_a, far_b))])
  np.testing.assert_array_equal(within_support(queries, support),
                                [True, True, True, False])
  served = serving.support_temperatures(tf.constant(queries, tf.float32), support, 0.4)
  np.testing.assert_array_equal(served.numpy(), np.float32([0.4, 0.4, 0.4, 1.0]))


def test_feature_support_over_blocks_fits_each_block_on_its_own():
  inputs = keras.Input((9,))
  features_model = keras.Model(inputs, inputs)
  rng = np.random.default_rng(16)
  labels = np.arange(60) % 3
  train = rng.normal(size=(60, 9)).astype(np.float32) + labels[:, np.newaxis]
  evaluated = rng.normal(size=(20, 9)).astype(np.float32)
  batches = lambda x, y: tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
  support = model_outputs.feature_support(features_model, batches(train, labels),
                                        batches(evaluated, labels[:20]), feature_widths=[5, 4])
  assert [part.start for part in support] == [0, 5]
  for part, columns in zip(support, (slice(0, 5), slice(5, 9))):
    alone = support_from_features(train[:, columns], labels, evaluated[:, columns])
    np.testing.assert_allclose(part.precision, alone.precision, rtol=1e-5, atol=1e-7)
    assert part.radius == pytest.approx(alone.radius, rel=1e-6)
  with pytest.raises(ValueError, match=r"widths \[5, 5\] do not cover the 9 features"):
    model_outputs.feature_support(features_model, batches(train, labels),
                                batches(evaluated, labels[:20]), feature_widths=[5, 5])


def _tiny_pooled_network():
  """Images -> 4 logits through one global average pooling (a penultimate layer)."""
  keras.utils.set_random_seed(0)
  inputs = keras.Input((32, 32, 3))
  pooled = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(6, 3)(inputs))
  return keras.Model(inputs, keras.layers.Dense(4)(pooled))


def test_calibrate_in_support_reads_the_train_features_and_records_the_radius():
  model = _tiny_pooled_network()
  rng = np.random.default_rng(14)
  mean, std = np.array([0.5, 0.5, 0.5], np.float32), np.array([0.25, 0.25, 0.25], np.float32)
  (images, labels, _), batches = _normalised_batches(rng, 12, 5, mean, std)
  _, train_batches = _normalised_batches(rng, 40, 16, mean, std)
  corrupted = validation_corrupted_set(batches, mean, std, 3, 16)
  info = registry.get("in_support").fit(
      model, HeldOut(batches, corrupted, train_batches=train_batches))
  features = model_outputs.penultimate_model(model)
  support = model_outputs.feature_support(features, train_batches, batches)
  assert info["temperature_fit"] == "in_support"
  assert info["support_radius"] == support.radius
  np.testing.assert_allclose(info["feature_support"].precision, support.precision)
  inside = mahalanobis_distance(
      model_outputs.model_logits(features, corrupted.batches)[0], support.class_means,
      support.precision) <= support.radius
  assert info["validation_inside_support"] == pytest.approx(inside.mean())
  shifted_logits, shifted_labels = model_outputs.model_logits(model, corrupted.batches)
  assert info["temperature"] == maths.select_temperature_under_shift(
      model(images).numpy(), labels, shifted_logits, shifted_labels, corrupted.slices,
      shifted_applies=inside)
  assert info["validation_nll_after"] <= info["validation_nll_before"]
  with pytest.raises(ValueError, match="needs the validation corruptions"):
    registry.get("in_support").fit(model, HeldOut(batches, train_batches=train_batches))


def test_in_support_refuses_a_network_without_one_pooling_layer():
  model = keras.Sequential([keras.layers.Flatten(input_shape=(32, 32, 3)),
                            keras.layers.Dense(4)])
  with pytest.raises(maths.TemperatureFitError, match="one global average pooling"):
    model_outputs.penultimate_model(model)


def _labelled_logits(rng, count, margin, correct_fraction, classes=4):
  """Logits whose top class is the label for `correct_fraction` of the examples, a random
  other class otherwise, `margin` above the rest."""
  labels = rng.integers(0, classes, count)
  top = np.where(rng.random(count) < correct_fraction, labels,
                 (labels + rng.integers(1, classes, count)) % classes)
  logits = rng.normal(0.0, 0.1, (count, classes))
  logits[np.arange(count), top] += margin
  return logits, labels


def test_distance_curve_sharpens_near_the_data_and_softens_far_from_it():
  """Clean and mildly shifted inputs are right but under-confident (they ask for T < 1); far
  inputs are confidently wrong (they ask for T > 1): the fitted T rises with the distance."""
  rng = np.random.default_rng(25)
  clean_logits, clean_labels = _labelled_logits(rng, 400, 1.0, 1.0)
  clean_scores = rng.normal(0.0, 1.0, 400)
  mild_logits, mild_labels = _labelled_logits(rng, 200, 1.0, 0.97)
  far_logits, far_labels = _labelled_logits(rng, 200, 5.0, 0.25)
  shifted_logits = np.concatenate([mild_logits, far_logits])
  shifted_labels = np.concatenate([mild_labels, far_labels])
  slices = np.array(["mild"] * 200 + ["far"] * 200)
  shifted_scores = np.concatenate([rng.normal(3.0, 0.5, 200), rng.normal(10.0, 1.0, 200)])
  curve = distance_curve.fit_distance_curve(clean_logits, clean_labels, clean_scores,
                                         shifted_logits, shifted_labels, slices, shifted_scores)
  assert curve.slope > 0
  near, just_outside, far = curve.temperatures(np.array([0.0, 3.0, 10.0]))
  assert near < just_outside < far and near < 1 and just_outside < 1 < far
  served = shifted_logits / curve.temperatures(shifted_scores)[:, np.newaxis]
  for name, sharper in (("mild", True), ("far", False)):
    mask = slices == name
    confidence = np.exp(maths.log_softmax(served[mask])).max(axis=1).mean()
    raw_confidence = np.exp(maths.log_softmax(shifted_logits[mask])).max(axis=1).mean()
    assert (confidence > raw_confidence) == sharper, name
  raw = maths.slice_means(shifted_logits, shifted_labels, slices)
  after = maths.slice_means(served, shifted_labels, slices)
  assert after[0] < raw[0] and after[1] < raw[1]


def test_distance_curve_is_never_sharper_farther_from_the_data():
  """Far inputs that are right and under-confident would ask for a falling T: the curve stays
  flat instead (slope >= 0), so no input is sharpened for lying far out."""
  rng = np.random.default_rng(26)
  clean_logits, clean_labels = _labelled_logits(rng, 300, 6.0, 0.6)  # Over-confident.
  far_logits, far_labels = _labelled_logits(rng, 300, 0.5, 1.0)  # Right, under-confident.
  curve = distance_curve.fit_distance_curve(clean_logits, clean_labels, rng.normal(0, 1, 300),
                                         far_logits, far_labels, np.full(300, "far"),
                                         rng.normal(8.0, 1.0, 300))
  assert curve.slope == 0.0
  t = curve.temperatures(np.linspace(-3, 20, 24))
  assert np.all(np.diff(t) >= 0)


def test_distance_curve_is_drawn_back_until_the_validation_shift_is_no_worse_than_raw():
  """Clean images that ask for strong sharpening and a shift at the same distance that asks
  for softening: the best curve for both together costs the shift, so the fit takes the
  first curve on the way to the raw softmax at which the shift's NLL and ECE are no worse."""
  rng = np.random.default_rng(27)
  clean_logits, clean_labels = _labelled_logits(rng, 2000, 1.5, 1.0)
  shifted_logits, shifted_labels = _labelled_logits(rng, 200, 1.5, 0.65)
  scores = rng.normal(0.0, 0.1, 2200)
  slices = np.full(200, "shift")
  curve = distance_curve.fit_distance_curve(clean_logits, clean_labels, scores[:2000],
                                         shifted_logits, shifted_labels, slices, scores[2000:])
  raw_nll, raw_ece = maths.slice_means(shifted_logits, shifted_labels, slices)
  moved = shifted_logits / curve.temperatures(scores[2000:])[:, np.newaxis]
  nll_after, ece_after = maths.slice_means(moved, shifted_labels, slices)
  assert nll_after <= raw_nll and ece_after <= raw_ece
  unconstrained = shifted_logits / np.exp(np.log(maths.fit_temperature(
      np.concatenate([clean_logits, shifted_logits]),
      np.concatenate([clean_labels, shifted_labels]),
      np.r_[np.full(2000, 1 / 2000), np.full(200, 1 / 200)])))
  assert maths.nll(unconstrained, shifted_labels) > raw_nll, "the rule had work to do"
  assert curve.log_temperature < 0, "still sharpens the clean images as far as allowed"
  assert maths.nll(clean_logits / curve.temperatures(scores[:2000])[:, np.newaxis],
                         clean_labels) < maths.nll(clean_logits, clean_labels)


def test_distance_scores_are_the_parts_mean_standardised_log_distance_in_numpy_and_tf():
  rng = np.random.default_rng(28)
  train = rng.normal(0, 1, (80, 6))
  labels = np.arange(80) % 2
  evaluated = rng.normal(0, 1, (30, 6))
  parts = (support_from_features(train[:, :3], labels, evaluated[:, :3], 0),
           support_from_features(train[:, 3:], labels, evaluated[:, 3:], 3))
  inputs = np.concatenate([evaluated[:5], evaluated[5:10] + [[9, 9, 9, 0, 0, 0]]])
  each = [(np.log(mahalanobis_distance(part.columns(inputs), part.class_means,
                                                  part.precision)) - part.log_distance_mean)
          / part.log_distance_std for part in parts]
  expected = np.mean(each, axis=0)
  np.testing.assert_allclose(distance_scores(inputs, parts), expected)
  np.testing.assert_allclose(serving.graph_distance_scores(tf.constant(inputs), parts),
                             expected, rtol=1e-9)
  own = distance_scores(evaluated[:, :3], parts[0])
  assert abs(own.mean()) < 1e-9 and own.std() == pytest.approx(1.0)  # The eval images' unit.
  curve = distance_curve.DistanceCurve(-0.5, 0.3)
  np.testing.assert_allclose(serving.curve_temperatures(curve, tf.constant(expected)),
                             curve.temperatures(expected), rtol=1e-6)


def test_calibrate_distance_curve_fits_on_eval_images_and_the_validation_corruptions_only(
    monkeypatch):
  """No leakage: the only corrupted images that reach the fit are eval images under the four
  validation corruptions (never a benchmark corruption), and the pipeline transforms only the
  train and eval splits for the Trainer, so no test image can reach it either."""
  requested = []
  corrupt_all = reference_corruptions.corrupt_all

  def spy(requests, *args, **kwargs):
    requests = list(requests)
    requested.extend(name for _, name, _, _ in requests)
    return corrupt_all(requests, *args, **kwargs)

  monkeypatch.setattr(reference_corruptions, "corrupt_all", spy)
  model = _tiny_pooled_network()
  rng = np.random.default_rng(15)
  mean, std = np.array([0.5, 0.5, 0.5], np.float32), np.array([0.25, 0.25, 0.25], np.float32)
  _, batches = _normalised_batches(rng, 12, 5, mean, std)
  _, train_batches = _normalised_batches(rng, 40, 16, mean, std)
  corrupted = validation_corrupted_set(batches, mean, std, 3, 16)
  info = registry.get("distance_curve").fit(
      model, HeldOut(batches, corrupted, train_batches=train_batches))
  assert requested and set(requested) == set(VALIDATION_CORRUPTIONS)
  assert not set(requested) & set(reference_corruptions.BENCHMARK_CORRUPTIONS)
  assert info["temperature_fit"] == "distance_curve"
  assert info["validation_examples"] == 4 * 5 * 3 == len(info["validation_distance_scores"])
  assert len(info["eval_distance_scores"]) == info["eval_examples"] == 12
  assert info["validation_nll_after"] <= info["validation_nll_before"]
  assert info["validation_ece_after"] <= info["validation_ece_before"]
  assert info["temperature"] == pytest.approx(np.exp(info["distance_curve"]["log_temperature"]))
  from tfx.types import Channel, standard_artifacts
  from pipeline import pipeline as pipeline_graph
  from pipeline.config import PipelineConfig
  transform = pipeline_graph.transform_component(
      PipelineConfig(), Channel(type=standard_artifacts.Examples),
      Channel(type=standard_artifacts.Schema), "")
  splits = json.loads(transform.exec_properties["splits_config"])
  assert splits["transform"] == ["train", "eval"]
  with pytest.raises(ValueError, match="needs the train split"):
    registry.get("distance_curve").fit(model, HeldOut(batches, corrupted))
