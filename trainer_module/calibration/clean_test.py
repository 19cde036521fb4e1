"""temperature_fit=clean: the eval logits' NLL minimum, recorded and read back."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from trainer_module.calibration import maths, record, registry
from trainer_module.calibration.method import HeldOut


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
  assert info["eval_nll_before"] == pytest.approx(maths.nll(logits, labels))
  assert info["eval_nll_after"] == pytest.approx(maths.nll(logits, labels, info["temperature"]))
  assert info["eval_ece_after"] == pytest.approx(maths.ece(logits, labels, info["temperature"]))
  assert info["eval_nll_after"] < info["eval_nll_before"]
  record.write_calibration_info(str(tmp_path), info)
  assert record.read_calibration_info(str(tmp_path)) == info
  with pytest.raises(maths.TemperatureFitError, match="eval split is empty"):
    registry.get("clean").fit(model, HeldOut(batches.take(0)))
