"""temperature_fit=validation_corruptions: the fit records the validation shift before and after."""
import numpy as np
import pytest
import tf_keras as keras

from test_support.calibration_data import normalised_batches
from trainer_module.calibration import maths, model_outputs, registry
from trainer_module.calibration.inputs import validation_corrupted_set
from trainer_module.calibration.method import VALIDATION_CORRUPTIONS, HeldOut


def test_calibrate_with_validation_corruptions_records_the_shift_before_and_after():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.layers.Flatten(input_shape=(32, 32, 3)),
                            keras.layers.Dense(4)])
  rng = np.random.default_rng(10)
  mean, std = np.array([0.5, 0.5, 0.5], np.float32), np.array([0.25, 0.25, 0.25], np.float32)
  (images, labels, _), batches = normalised_batches(rng, 12, 5, mean, std)
  corrupted = validation_corrupted_set(batches, mean, std, 3, 16)
  info = registry.get("validation_corruptions").fit(model, HeldOut(batches, corrupted))
  shifted_logits, shifted_labels = model_outputs.model_logits(model, corrupted.batches)
  assert info["temperature_fit"] == "validation_corruptions"
  assert info["validation_examples"] == 3 * len(VALIDATION_CORRUPTIONS) * 5
  logits, temperature = model(images).numpy(), info["temperature"]
  assert temperature == maths.select_temperature_under_shift(
      logits, labels, shifted_logits, shifted_labels, corrupted.slices)
  assert (info["validation_nll_after"], info["validation_ece_after"]) == pytest.approx(
      maths.slice_means(shifted_logits / temperature, shifted_labels, corrupted.slices))
  assert info["validation_nll_after"] < info["validation_nll_before"]
  assert info["validation_ece_after"] < info["validation_ece_before"]
  assert info["eval_nll_after"] == pytest.approx(maths.nll(logits, labels, temperature))
  assert info["eval_nll_after"] < info["eval_nll_before"]
  with pytest.raises(ValueError, match="does not read the train split's batches"):
    registry.get("validation_corruptions").fit(model, HeldOut(batches, corrupted,
                                                              train_batches=batches))
