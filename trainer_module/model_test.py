"""The Wide ResNet: the published size, the block structure, per-group L2, its batch norm, and
its optional spectrally normalised convolutions."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from test_support.tiny_config import plain_trainer
from trainer_module.config import TrainerConfig
from trainer_module.model import BatchNormalization, SpectralNormConv2D, wide_resnet


def test_wrn_28_10_has_the_published_parameter_count():
  """36,479,194 trainable (Zagoruyko & Komodakis's 36.5M); batch norm's running mean and
  variance are the only other weights: 2 per channel of each pre-activation batch norm."""
  model = wide_resnet(plain_trainer(depth=28, width_multiplier=10))
  blocks, widths = (28 - 4) // 6, (16, 160, 320, 640)
  # Each group: its first block's two (input width, then group width), 2 x group width for the
  # others; then one before the classifier.
  batch_norm_channels = sum(widths[g] + widths[g + 1] + (blocks - 1) * 2 * widths[g + 1]
                            for g in range(3)) + widths[3]
  assert sum(int(np.prod(v.shape)) for v in model.trainable_weights) == 36_479_194
  assert sum(int(np.prod(v.shape)) for v in model.non_trainable_weights) == (
      2 * batch_norm_channels)


def test_small_wrn_maps_images_to_logits_per_class():
  model = wide_resnet(plain_trainer(depth=10, width_multiplier=1, num_classes=7))
  logits = model(tf.zeros([2, 32, 32, 3]), training=False)
  assert logits.shape == (2, 7)
  convs = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.Conv2D)
           or type(layer).__name__ == "Conv2D"]
  # Input conv + 3 groups x 1 block x 2 convs + 2 projection shortcuts (width changes).
  assert len(convs) == 1 + 6 + 2
  assert all(not conv.use_bias for conv in convs)


def test_per_group_l2_falls_back_to_l2():
  base = plain_trainer(depth=10, width_multiplier=1, l2=1e-3)
  override = plain_trainer(depth=10, width_multiplier=1, l2=1e-3, dense_kernel_l2=0.5)
  model_base, model_override = wide_resnet(base), wide_resnet(override)
  model_override.set_weights(model_base.get_weights())
  dense = model_base.get_layer("logits").kernel.numpy()
  difference = float(tf.add_n(model_override.losses) - tf.add_n(model_base.losses))
  np.testing.assert_allclose(difference, (0.5 - 1e-3) * np.sum(dense**2), rtol=1e-4)


def test_depth_must_be_6n_plus_4():
  with pytest.raises(ValueError, match=r"depth=12: must be 6n\+4 with n >= 1"):
    plain_trainer(depth=12)


def test_under_mixed_bfloat16_convolutions_are_16_bit_and_logits_and_statistics_float32():
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = wide_resnet(plain_trainer(depth=10, width_multiplier=1))
  finally:
    keras.mixed_precision.set_global_policy("float32")
  convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
  assert {conv.compute_dtype for conv in convs} == {"bfloat16"}
  assert model.get_layer("logits").compute_dtype == "float32"
  assert model(tf.zeros([2, 32, 32, 3]), training=True).dtype == tf.float32
  # Weights and batch-norm moving statistics are float32; the batch norm's output is bf16.
  assert {v.dtype for v in model.variables} == {tf.float32}
  batch_norm = model.get_layer("final_bn")
  assert batch_norm(tf.zeros([2, 8, 8, 64], tf.bfloat16), training=True).dtype == tf.bfloat16


def _pair_of_batch_norms(shape):
  """Ours and Keras' synchronized layer (the unfused kernel), with the same weights."""
  ours = BatchNormalization(momentum=0.9, epsilon=1e-5, synchronized=True)
  keras_own = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, synchronized=True)
  ours.build(shape)
  keras_own.build(shape)
  keras_own.set_weights([np.full(shape[-1:], 0.5 + i, np.float32) for i in range(4)])
  ours.set_weights(keras_own.get_weights())
  return ours, keras_own


def test_the_fused_batch_norm_computes_what_keras_synchronized_layer_computes_on_one_replica():
  images = tf.random.stateless_normal([8, 6, 6, 5], seed=[1, 2], mean=2.0, stddev=3.0)
  upstream = tf.random.stateless_normal(images.shape, seed=[5, 6])
  results = []
  for layer in _pair_of_batch_norms(images.shape):
    with tf.GradientTape() as tape:
      tape.watch(images)
      outputs = layer(images, training=True)
      loss = tf.reduce_sum(outputs * upstream)
    gradients = tape.gradient(loss, [images] + layer.trainable_variables)
    results.append([outputs, *gradients, layer.moving_mean, layer.moving_variance,
                    layer(images, training=False)])
  ours, keras_own = results
  names = ["outputs", "d/images", "d/gamma", "d/beta", "moving mean", "moving variance "
           "(no Bessel's correction)", "inference outputs"]
  for name, mine, theirs in zip(names, ours, keras_own):
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5, err_msg=name)


def test_keras_batch_norm_checkpoints_restore_into_the_fused_layer_and_back(tmp_path):
  ours, keras_own = _pair_of_batch_norms(tf.TensorShape([2, 4, 4, 3]))
  ours.set_weights([np.zeros(3, np.float32)] * 4)
  path = tf.train.Checkpoint(layer=keras_own).save(str(tmp_path / "keras"))
  tf.train.Checkpoint(layer=ours).restore(path).assert_consumed()
  for mine, theirs in zip(ours.get_weights(), keras_own.get_weights()):
    np.testing.assert_array_equal(mine, theirs)
  # And back: ours, changed, restored into Keras' layer.
  ours.set_weights([np.full(3, 7.0 + i, np.float32) for i in range(4)])
  path = tf.train.Checkpoint(layer=ours).save(str(tmp_path / "ours"))
  tf.train.Checkpoint(layer=keras_own).restore(path).assert_consumed()
  for mine, theirs in zip(ours.get_weights(), keras_own.get_weights()):
    np.testing.assert_array_equal(theirs, mine)


def test_a_saved_model_rebuilds_the_fused_layer_from_its_config(tmp_path):
  model = wide_resnet(plain_trainer(depth=10, width_multiplier=1))
  model.save(str(tmp_path / "model"), save_format="tf", save_traces=False)
  loaded = keras.models.load_model(str(tmp_path / "model"), compile=False)
  assert isinstance(loaded.get_layer("final_bn"), BatchNormalization)
  images = tf.random.stateless_uniform([2, 32, 32, 3], seed=[3, 4])
  np.testing.assert_allclose(loaded(images, training=False), model(images, training=False),
                             rtol=1e-5, atol=1e-5)


def _operator_norm(layer, kernel) -> float:
  """The largest singular value of the linear map the convolution applies to one input of the
  layer's built shape (padding and stride included), from the map's matrix."""
  shape = tuple(layer.power_vector.shape[1:])
  size = int(np.prod(shape))
  basis = tf.reshape(tf.eye(size), (size,) + shape)
  matrix = tf.reshape(layer.convolution_op(basis, kernel), (size, -1)).numpy()
  return float(np.linalg.svd(matrix, compute_uv=False)[0])


def _normalised_conv(kernel_size, strides, bound=1.0, input_shape=(8, 8, 3)):
  keras.utils.set_random_seed(1)
  layer = SpectralNormConv2D(5, kernel_size, strides=strides, padding="same", use_bias=False,
                             kernel_initializer="he_normal", norm_bound=bound)
  layer.build((None,) + input_shape)
  return layer


@pytest.mark.parametrize("kernel_size,strides", [(3, 1), (3, 2), (1, 2)])
def test_after_training_steps_each_convolution_s_spectral_norm_is_at_most_the_bound(
    kernel_size, strides):
  layer = _normalised_conv(kernel_size, strides)
  images = tf.random.stateless_normal([32, 8, 8, 3], seed=[1, 2])
  labels = tf.random.stateless_uniform([32], seed=[3, 4], maxval=5, dtype=tf.int32)
  optimizer = keras.optimizers.SGD(0.1)

  @tf.function(autograph=False)
  def train_step():
    """Traced once, as the trainer's step is (eagerly, 60 steps cost ~0.5 CPU-s)."""
    with tf.GradientTape() as tape:
      logits = 10 * tf.reduce_mean(layer(images, training=True), axis=[1, 2])
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables),
                                  layer.trainable_variables))

  for step in range(60):
    if step == 40:  # The end of a schedule: the kernel settles, the power iteration catches up.
      optimizer.learning_rate.assign(0.001)
    train_step()
  assert _operator_norm(layer, layer.kernel) > 2.0  # The trained kernel itself is far above.
  # One power-iteration step per training call lags a moving kernel by a little.
  assert _operator_norm(layer, layer.bounded_kernel()) <= 1.02
  np.testing.assert_allclose(layer(images), layer.convolution_op(images, layer.bounded_kernel()),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel_size,strides", [(3, 1), (3, 2), (1, 1)])
def test_the_power_iteration_finds_the_operator_s_norm_and_leaves_smaller_kernels_alone(
    kernel_size, strides):
  layer = _normalised_conv(kernel_size, strides)
  raw_norm = _operator_norm(layer, layer.kernel)
  for bound in (raw_norm / 3, raw_norm * 1.5):
    layer.norm_bound = bound

    @tf.function
    def power_iterations():
      """300 steps in one graph loop, as training calls them (eagerly: ~0.6 CPU-s)."""
      for _ in tf.range(300):
        layer.bounded_kernel(update=True)

    power_iterations()
    np.testing.assert_allclose(_operator_norm(layer, layer.bounded_kernel()),
                               min(bound, raw_norm), rtol=2e-3)
  np.testing.assert_array_equal(layer.bounded_kernel(), layer.kernel)
  vector = layer.power_vector.numpy()
  layer(tf.ones([2, 8, 8, 3]), training=False)  # Inference leaves the estimate alone.
  np.testing.assert_array_equal(layer.power_vector, vector)


def test_spectral_norm_keeps_the_plain_networks_layers_and_variable_names():
  assert TrainerConfig().model.spectral_norm_bound == 0.25  # The default.
  plain = wide_resnet(plain_trainer(depth=10, width_multiplier=1))
  normalised = wide_resnet(plain_trainer(depth=10,
                                                   width_multiplier=1,
                                                   spectral_norm_bound=3.0))
  convs = [layer for layer in plain.layers if isinstance(layer, keras.layers.Conv2D)]
  assert {type(conv) for conv in convs} == {keras.layers.Conv2D}
  assert not any("power_vector" in v.name for v in plain.variables)
  # The same layers and variable names (warm start and checkpoints match by name), with a
  # non-trainable power-iteration vector beside each normalised kernel.
  assert [v.name for v in normalised.trainable_variables] == [
      v.name for v in plain.trainable_variables]
  sn_convs = [layer for layer in normalised.layers if isinstance(layer, SpectralNormConv2D)]
  assert [conv.name for conv in sn_convs] == [conv.name for conv in convs]
  assert {conv.norm_bound for conv in sn_convs} == {3.0}
  assert sorted(v.name for v in normalised.non_trainable_variables if "power_vector" in v.name) \
      == sorted(f"{conv.name}/power_vector:0" for conv in convs)


def test_spectral_norm_bound_must_not_be_negative():
  with pytest.raises(ValueError, match=r"^Invalid config value spectral_norm_bound=-1.0: must be "
                     r">= 0 \(0 = no spectral normalisation\)"):
    plain_trainer(spectral_norm_bound=-1.0)


def test_a_spectrally_normalised_model_trains_in_mixed_bfloat16_and_reloads_from_its_config(
    tmp_path):
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = wide_resnet(plain_trainer(depth=10,
                                                width_multiplier=1,
                                                spectral_norm_bound=1.0))
  finally:
    keras.mixed_precision.set_global_policy("float32")
  conv = model.get_layer("group_2_block_0_conv_1")
  assert conv.compute_dtype == "bfloat16" and conv.power_vector.dtype == tf.float32
  images = tf.random.stateless_uniform([2, 32, 32, 3], seed=[3, 4])
  vector = conv.power_vector.numpy()
  assert np.isfinite(model(images, training=True)).all()
  assert not np.array_equal(conv.power_vector, vector)  # A training call updates the estimate.
  model.save(str(tmp_path / "model"), save_format="tf", save_traces=False)
  loaded = keras.models.load_model(str(tmp_path / "model"), compile=False)
  assert isinstance(loaded.get_layer(conv.name), SpectralNormConv2D)
  assert loaded.get_layer(conv.name).norm_bound == 1.0
  np.testing.assert_allclose(loaded(images, training=False), model(images, training=False),
                             rtol=2e-2, atol=2e-2)


def test_per_image_centering_makes_the_logits_blind_to_global_brightness_only(tmp_path):
  images = tf.random.stateless_normal([3, 32, 32, 3], seed=[5, 6])
  plain = wide_resnet(plain_trainer(depth=10, width_multiplier=1,
                                              per_image_normalization="none"))
  assert not np.allclose(plain(images + 1.5, training=False), plain(images, training=False),
                         atol=1e-3), "without centring a change of brightness moves the logits"
  model = wide_resnet(plain_trainer(depth=10, width_multiplier=1,
                                              per_image_normalization="centering"))
  np.testing.assert_allclose(model(images + 1.5, training=False), model(images, training=False),
                             rtol=1e-4, atol=1e-4)
  assert not np.allclose(model(0.4 * images, training=False), model(images, training=False),
                         atol=1e-3), "a change of contrast still moves the logits"
  model.save(str(tmp_path / "model"), save_format="tf", save_traces=False)
  loaded = keras.models.load_model(str(tmp_path / "model"), compile=False)
  np.testing.assert_allclose(loaded(images - 0.7, training=False), model(images, training=False),
                             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["center", "standardization"])
def test_an_unknown_per_image_normalization_is_refused_by_name(name):
  with pytest.raises(ValueError, match=f"per_image_normalization='{name}': must be one of "
                                       r"\('none', 'centering'\)"):
    plain_trainer(per_image_normalization=name)


def test_the_trainers_inputs_are_centred_per_image_by_default_and_fed_as_they_are_without():
  assert TrainerConfig().model.per_image_normalization == "centering"
  # WRN-10-1: which layers there are does not depend on the width (10 by default).
  tiny = {"depth": 10, "width_multiplier": 1}
  assert [layer.name for layer in wide_resnet(TrainerConfig().replace(**tiny)).layers
          if layer.name.startswith("per_image")] == ["per_image_centering"]
  assert not [layer.name for layer in wide_resnet(plain_trainer(**tiny)).layers
              if layer.name.startswith("per_image")]
