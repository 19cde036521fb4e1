"""The network's logits and penultimate features on held-out batches."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from test_support.calibration_data import expected_class_statistics
from trainer_module.calibration import maths, model_outputs
from trainer_module.calibration.distances import mahalanobis_distance


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
    means, precision = expected_class_statistics(train[:, columns], labels)
    np.testing.assert_allclose(part.class_means, means, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(part.precision, precision, rtol=1e-5, atol=1e-6)
    assert part.radius == pytest.approx(
        mahalanobis_distance(evaluated[:, columns], means, precision).max(), rel=1e-5)
  with pytest.raises(ValueError, match=r"widths \[5, 5\] do not cover the 9 features"):
    model_outputs.feature_support(features_model, batches(train, labels),
                                  batches(evaluated, labels[:20]), feature_widths=[5, 5])


def test_feature_distances_refuse_a_network_without_one_pooling_layer():
  model = keras.Sequential([keras.layers.Flatten(input_shape=(32, 32, 3)),
                            keras.layers.Dense(4)])
  with pytest.raises(maths.TemperatureFitError, match="one global average pooling"):
    model_outputs.penultimate_model(model)
