"""The Wide ResNet: the published size, the block structure, and per-group L2."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from trainer_module.config import TrainerConfig
from trainer_module.model import wide_resnet


def test_wrn_28_10_has_the_published_parameter_count():
  assert wide_resnet(TrainerConfig(depth=28, width_multiplier=10)).count_params() == 36_497_146


def test_small_wrn_maps_images_to_logits_per_class():
  model = wide_resnet(TrainerConfig(depth=10, width_multiplier=1, num_classes=7))
  logits = model(tf.zeros([2, 32, 32, 3]), training=False)
  assert logits.shape == (2, 7)
  convs = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.Conv2D)
           or type(layer).__name__ == "Conv2D"]
  # Input conv + 3 groups x 1 block x 2 convs + 2 projection shortcuts (width changes).
  assert len(convs) == 1 + 6 + 2
  assert all(not conv.use_bias for conv in convs)


def test_per_group_l2_falls_back_to_l2():
  base = TrainerConfig(depth=10, width_multiplier=1, l2=1e-3)
  override = TrainerConfig(depth=10, width_multiplier=1, l2=1e-3, dense_kernel_l2=0.5)
  model_base, model_override = wide_resnet(base), wide_resnet(override)
  model_override.set_weights(model_base.get_weights())
  dense = model_base.get_layer("logits").kernel.numpy()
  difference = float(tf.add_n(model_override.losses) - tf.add_n(model_base.losses))
  np.testing.assert_allclose(difference, (0.5 - 1e-3) * np.sum(dense**2), rtol=1e-4)


def test_depth_must_be_6n_plus_4():
  with pytest.raises(ValueError, match="depth=12"):
    TrainerConfig(depth=12)


def test_under_mixed_bfloat16_convolutions_are_16_bit_and_logits_and_statistics_float32():
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = wide_resnet(TrainerConfig(depth=10, width_multiplier=1))
  finally:
    keras.mixed_precision.set_global_policy("float32")
  convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
  assert {conv.compute_dtype for conv in convs} == {"bfloat16"}
  assert model.get_layer("logits").compute_dtype == "float32"
  assert model(tf.zeros([2, 32, 32, 3]), training=True).dtype == tf.float32
  # Weights and batch-norm moving statistics are float32 (the layer normalises in float32).
  assert {v.dtype for v in model.variables} == {tf.float32}
