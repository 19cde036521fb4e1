"""The SNGP output layer against numpy, in a Wide ResNet under bfloat16, through a training run
(the last epoch's precision, resume) and a SavedModel round trip."""
import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from test_support.tiny_config import TINY_NETWORK, learnable_images, plain_trainer
from trainer_module import sngp
from trainer_module.config import TrainerConfig
from trainer_module.model import wide_resnet


def _numpy_gp(layer, inputs):
  """(random features, posterior-mode logits) of `layer` for `inputs`, in float64 numpy."""
  x = np.asarray(inputs, np.float64)
  normalised = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3)
  normalised = normalised * layer.norm_scale.numpy() + layer.norm_offset.numpy()
  features = np.cos(normalised @ layer.random_projection.numpy() / math.sqrt(layer.kernel_scale)
                    + layer.random_phase.numpy())
  return features, features @ layer.kernel.numpy() + layer.bias.numpy()


def test_the_layer_computes_numpy_s_features_precision_covariance_and_mean_field_logits():
  layer = sngp.RandomFeatureGaussianProcess(4, num_features=32, kernel_scale=2.0,
                                            ridge_penalty=0.5, mean_field_factor=math.pi / 8)
  rng = np.random.default_rng(0)
  first, second, test = (rng.normal(size=(n, 6)).astype(np.float32) for n in (10, 7, 5))
  layer(first, training=True)
  layer(second, training=True)
  train_features = np.concatenate([_numpy_gp(layer, first)[0], _numpy_gp(layer, second)[0]])
  precision = 0.5 * np.eye(32) + train_features.T @ train_features
  np.testing.assert_allclose(layer.precision.numpy(), precision, rtol=1e-4, atol=1e-4)

  features, logits = _numpy_gp(layer, test)
  np.testing.assert_allclose(layer(test, training=True), logits, rtol=1e-4, atol=1e-5)
  layer.precision.assign(precision)  # The check below is on the covariance, not the update.
  variance = 0.5 * np.einsum("bi,ij,bj->b", features, np.linalg.inv(precision), features)
  np.testing.assert_allclose(layer.variance(tf.constant(features, tf.float32)), variance,
                             rtol=1e-3)
  np.testing.assert_allclose(layer(test, training=False),
                             logits / np.sqrt(1 + math.pi / 8 * variance)[:, None],
                             rtol=1e-3, atol=1e-5)
  layer.reset_precision()
  np.testing.assert_array_equal(layer.precision.numpy(), 0.5 * np.eye(32))


def test_far_inputs_get_softer_logits_than_the_training_inputs():
  layer = sngp.RandomFeatureGaussianProcess(3, num_features=256, kernel_scale=8.0)
  rng = np.random.default_rng(1)
  train = rng.normal(size=(512, 8)).astype(np.float32) * 0.1 + np.arange(8, dtype=np.float32)
  layer(train, training=True)
  far = rng.normal(size=(64, 8)).astype(np.float32) * 3.0
  near_variance = layer.variance(layer.random_features(train[:64]))
  far_variance = layer.variance(layer.random_features(far))
  assert float(tf.reduce_max(near_variance)) < float(tf.reduce_min(far_variance))


def test_under_mixed_bfloat16_the_gp_head_is_float32_and_a_saved_model_reloads_it(tmp_path):
  config = plain_trainer(**TINY_NETWORK, output_layer="sngp",
                         sngp_random_features=64, sngp_mean_field_factor=25.0)
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = wide_resnet(config)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  head = model.get_layer("logits")
  assert isinstance(head, sngp.RandomFeatureGaussianProcess)
  assert head.compute_dtype == "float32" and head.precision.dtype == tf.float32
  assert head.num_features == 64 and head.mean_field_factor == 25.0
  images = tf.random.stateless_uniform([4, 32, 32, 3], seed=[1, 2])
  model(images, training=True)
  assert not np.allclose(head.precision.numpy(), np.eye(64))
  model.save(str(tmp_path / "model"), save_format="tf", save_traces=False)
  loaded = keras.models.load_model(str(tmp_path / "model"), compile=False)
  reloaded = loaded.get_layer("logits")
  np.testing.assert_array_equal(reloaded.precision.numpy(), head.precision.numpy())
  np.testing.assert_array_equal(reloaded.random_projection.numpy(),
                                head.random_projection.numpy())
  np.testing.assert_allclose(loaded(images, training=False), model(images, training=False),
                             rtol=2e-2, atol=2e-2)


def test_output_layer_and_sngp_settings_are_validated():
  with pytest.raises(ValueError, match=r"^Invalid config value output_layer='gp': must be one of "
                     r"\('dense', 'sngp'\)"):
    plain_trainer(output_layer="gp")
  with pytest.raises(ValueError,
                     match=r"^Invalid config value sngp_ridge_penalty=0.0: must be > 0"):
    plain_trainer(sngp_ridge_penalty=0.0)
  with pytest.raises(ValueError, match=r"^Invalid config value sngp_mean_field_factor=-1.0: must "
                     r"be >= 0 \(0 = the posterior mode's logits\)"):
    plain_trainer(sngp_mean_field_factor=-1.0)
  assert TrainerConfig().model.output_layer == "sngp"  # The default.


def test_training_serves_the_last_epoch_s_precision_and_resumes_with_it(tmp_path):
  from trainer_module.training_loop import Training, fit
  images, views, labels = learnable_images()
  config = plain_trainer(**TINY_NETWORK, num_classes=2, train_epochs=3,
                         per_core_batch_size=32, lr_warmup_epochs=0, log_every_steps=4,
                         output_layer="sngp", sngp_random_features=32)
  strategy = tf.distribute.get_strategy()
  training = Training(config, strategy, 4, str(tmp_path / "checkpoints"))
  training.restore()
  batches = tf.data.Dataset.from_tensor_slices((images, views, labels)).repeat().batch(32)
  fit(training, strategy.experimental_distribute_dataset(batches), None,
      tf.summary.create_noop_writer())
  head = training.model.get_layer("logits")
  # The last epoch's 4 batches of 32 under the final weights' neighbours: trace = sum |phi|^2,
  # about 128 * D / 2; three epochs without the reset would give about three times that.
  accumulated = np.trace(head.precision.numpy()) - 32 * config.model.sngp_ridge_penalty
  assert 0.7 * 128 * 16 < accumulated < 1.3 * 128 * 16
  resumed = Training(config, strategy, 4, str(tmp_path / "checkpoints"))
  resumed.restore()
  np.testing.assert_array_equal(resumed.model.get_layer("logits").precision.numpy(),
                                head.precision.numpy())


def test_an_exported_sngp_model_serves_the_mean_field_logits_in_both_signatures(tmp_path):
  import tensorflow_transform as tft
  from test_support.transform_runs import digits_transform_dir, raw_digit_examples
  from trainer_module.export import export_serving_model, float32_model
  from trainer_module.features import IMAGE_KEY, UNCALIBRATED_PROBABILITIES_KEY
  raw = raw_digit_examples(8)
  tft_output = tft.TFTransformOutput(digits_transform_dir(len(raw)))  # These 8, transformed.
  config = plain_trainer(**TINY_NETWORK, output_layer="sngp")
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    trained = wide_resnet(config)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  pngs = [example[IMAGE_KEY] for example in raw]
  images = tft_output.transform_features_layer()({IMAGE_KEY: tf.constant(pngs)})[IMAGE_KEY]
  trained(images, training=True)  # A precision of these images: their variances are small.
  model = float32_model(trained, config)
  export_serving_model(model, tft_output, str(tmp_path / "model"))
  served = tf.saved_model.load(str(tmp_path / "model"))
  expected = tf.nn.softmax(model(images, training=False)).numpy()
  by_images = served.signatures["serving_images"](images=tf.constant(pngs))
  by_examples = served.signatures["serving_default"](examples=tf.constant([
      tf.train.Example(features=tf.train.Features(feature={IMAGE_KEY: tf.train.Feature(
          bytes_list=tf.train.BytesList(value=[png]))})).SerializeToString() for png in pngs]))
  for result in (by_images, by_examples):
    np.testing.assert_allclose(result[UNCALIBRATED_PROBABILITIES_KEY], expected, atol=1e-5)
  head = model.get_layer("logits")
  features = head.random_features(keras.Model(model.inputs, head.input)(images))
  mode = tf.nn.softmax(tf.matmul(features, head.kernel) + head.bias).numpy()
  assert not np.allclose(mode, expected, atol=1e-3)  # Served: the mean field, not the mode.
