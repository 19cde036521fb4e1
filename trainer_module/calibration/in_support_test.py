"""temperature_fit=in_support: T within the eval images' feature radius, the raw softmax beyond."""
import numpy as np
import pytest

from testing.calibration_data import feature_distance_fit, miscalibrated
from trainer_module.calibration import maths, model_outputs, registry
from trainer_module.calibration.distances import mahalanobis_distance
from trainer_module.calibration.method import HeldOut


def test_in_support_keeps_the_clean_fit_where_the_slice_that_forbids_it_lies_outside():
  """The default model's case again: the strong slice that forbids sharpening is far from the
  training data, so the T that applies only within the support is the clean fit; the mild
  slice inside still bounds it, and far-off inputs keep the raw softmax."""
  rng = np.random.default_rng(4)
  clean = miscalibrated(rng, 0.5)
  mild, strong = miscalibrated(rng, 0.4, count=1500), miscalibrated(rng, 1.3, count=1500)
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


def test_calibrate_in_support_reads_the_train_features_and_records_the_radius():
  """The network's logits scaled 3x: the validation images within the radius allow softening
  that the whole slices would forbid."""
  model, images, labels, held_out = feature_distance_fit(18)
  logits_layer = model.layers[-1]
  logits_layer.set_weights([3.0 * weights for weights in logits_layer.get_weights()])
  batches, corrupted, train_batches = (held_out.eval_batches, held_out.validation_corrupted,
                                       held_out.train_batches)
  info = registry.get("in_support").fit(model, held_out)
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
  logits = model(images).numpy()
  inside_only, everywhere = (
      maths.select_temperature_under_shift(logits, labels, shifted_logits, shifted_labels,
                                           corrupted.slices, shifted_applies=applies)
      for applies in (inside, None))
  assert everywhere == 1.0 < inside_only
  assert info["temperature"] == inside_only
  served = shifted_logits / np.where(inside, inside_only, 1.0)[:, np.newaxis]
  assert info["validation_nll_after"] == pytest.approx(
      maths.slice_means(served, shifted_labels, corrupted.slices)[0])
  assert info["validation_nll_after"] < info["validation_nll_before"]
  assert info["eval_nll_after"] == pytest.approx(maths.nll(logits, labels, inside_only))
  with pytest.raises(ValueError, match="needs the validation corruptions"):
    registry.get("in_support").fit(model, HeldOut(batches, train_batches=train_batches))
