"""Wide ResNet (Zagoruyko & Komodakis 2016) as in Uncertainty Baselines' CIFAR recipe, with
structural layer names (warm start matches variables by them) and the optional spectral
normalisation and SNGP head. Architecture: docs/standalone_trainer.md, "The model".
"""
import tensorflow as tf
import tf_keras as keras

from trainer_module.config import TrainerConfig
from trainer_module.features import IMAGE_SHAPE
from trainer_module.sngp import RandomFeatureGaussianProcess

_BN_MOMENTUM = 0.9
_BN_EPSILON = 1e-5


@keras.saving.register_keras_serializable(package="trainer_module")
class SpectralNormConv2D(keras.layers.Conv2D):
  """A convolution whose operator's spectral norm is at most `norm_bound`: it convolves with
  W / max(1, sigma / norm_bound), sigma the largest singular value of the linear map the layer
  applies (stride and padding included, on its input's height and width), estimated by one
  power-iteration step per training call on a persistent vector, so the bound holds up to the
  iteration's lag behind a moving kernel. Bounded convolutions with residual connections are
  how DDU (Mukhoti et al. 2023) and SNGP (Liu et al. 2020) keep feature distances tracking input
  distances (batch norm's scales stay free, as in both).

  The method of DDU's `SpectralNormConv.compute_weight` (net/spectral_normalization/
  spectral_norm_conv_inplace.py: the iteration on the operator with conv2d and its transpose,
  W itself the trained parameter, sigma differentiated through) and edward2's
  `SpectralNormalizationConv2D.update_weights` (which instead overwrites the kernel variable).
  Not tf_keras' `SpectralNormalization`: it scales to exactly 1, iterates on the kernel reshaped
  to a matrix, overwrites the kernel, and branches in Python on a tensor, which the trainer's
  AutoGraph-free step cannot trace. Under a mixed policy sigma is that of the 16-bit kernel the
  convolution applies, computed in float32.
  """

  def __init__(self, *args, norm_bound: float, **kwargs):
    super().__init__(*args, **kwargs)
    if norm_bound <= 0:
      raise ValueError(f"norm_bound must be > 0, got {norm_bound}.")
    self.norm_bound = norm_bound

  def build(self, input_shape):
    super().build(input_shape)
    if (self.groups != 1 or tuple(self.dilation_rate) != (1, 1)
        or self.data_format != "channels_last" or self.padding == "causal"):
      raise ValueError(f"{self.name}: SpectralNormConv2D supports ungrouped, undilated "
                       "channels-last convolutions only.")
    # A unit vector of the operator's input space (one image), the right singular vector
    # estimate; float32 under every policy.
    self.power_vector = self.add_weight(
        name="power_vector", shape=(1,) + tuple(input_shape[1:]), dtype="float32",
        initializer=keras.initializers.RandomNormal(), trainable=False,
        aggregation=tf.VariableAggregation.MEAN, experimental_autocast=False)

  def _operator(self, images, kernel):
    return self.convolution_op(images, kernel)

  def _operator_transpose(self, outputs, kernel):
    return tf.nn.conv2d_transpose(outputs, kernel, tf.shape(self.power_vector),
                                  strides=list(self.strides), padding=self.padding.upper())

  def bounded_kernel(self, update: bool = False) -> tf.Tensor:
    """The kernel the layer convolves with (float32); `update`: one power-iteration step
    first, stored in the vector."""
    kernel = tf.cast(self.kernel, tf.float32)  # The compute dtype's rounding, in float32.
    vector = tf.math.l2_normalize(self.power_vector)
    if update:
      vector = tf.stop_gradient(tf.math.l2_normalize(
          self._operator_transpose(self._operator(vector, kernel), kernel)))
      self.power_vector.assign(vector)
    sigma = tf.norm(self._operator(vector, kernel))
    return kernel / tf.maximum(1.0, sigma / self.norm_bound)

  def call(self, inputs, training=None):
    kernel = tf.__internal__.smart_cond.smart_cond(
        False if training is None else training,
        lambda: self.bounded_kernel(update=True), lambda: self.bounded_kernel(update=False))
    outputs = self.convolution_op(inputs, tf.cast(kernel, self.compute_dtype))
    if self.use_bias:
      outputs = tf.nn.bias_add(outputs, tf.cast(self.bias, outputs.dtype))
    return self.activation(outputs)

  def get_config(self):
    return {**super().get_config(), "norm_bound": self.norm_bound}


@keras.saving.register_keras_serializable(package="trainer_module")
class PerImageCentering(keras.layers.Layer):
  """x - mean over each image's values, weightless and in float32 under every policy: a change
  of brightness that adds the same amount to every pixel moves nothing after it."""

  def __init__(self, **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)

  def call(self, inputs):
    images = tf.cast(inputs, tf.float32)
    return images - tf.reduce_mean(images, axis=[1, 2, 3], keepdims=True)


def _conv(filters, kernel_size, strides, l2, name, norm_bound=0.0):
  """A bias-free convolution; with norm_bound > 0, spectrally normalised to that bound."""
  layer, extra = ((SpectralNormConv2D, {"norm_bound": norm_bound}) if norm_bound > 0
                  else (keras.layers.Conv2D, {}))
  return layer(
      filters, kernel_size, strides=strides, padding="same", use_bias=False,
      kernel_initializer="he_normal", kernel_regularizer=keras.regularizers.l2(l2), name=name,
      **extra)


@keras.saving.register_keras_serializable(package="trainer_module")
class BatchNormalization(keras.layers.BatchNormalization):
  """Synchronized batch norm (statistics over the global batch across replicas, so N devices
  compute what one device computes on the same batch) that runs TensorFlow's fused kernel
  when there is one replica: Keras' synchronized layer is the unfused one, which casts 16-bit
  inputs to float32 and was a quarter of a bfloat16 step; the fused kernel takes bfloat16
  activations with float32 scale, offset and statistics, and is faster in float32 as well.

  The moving statistics stay float32 and mean what the unfused layer's mean: the fused
  kernel's batch variance carries Bessel's correction, removed before the moving average.
  The variables are Keras' own, so checkpoints of either layer restore into the other."""

  def _fused_applies(self, inputs, training, mask) -> bool:
    replica = tf.distribute.get_replica_context()
    return (mask is None and isinstance(training, bool) and inputs.shape.rank == 4
            and self.axis == [3] and not self.renorm and self.virtual_batch_size is None
            and self.adjustment is None and self.center and self.scale
            and (replica is None or replica.num_replicas_in_sync == 1))

  def call(self, inputs, training=None, mask=None):
    training = self._get_training_value(training)
    if not self._fused_applies(inputs, training, mask):
      return super().call(inputs, training=training, mask=mask)
    if not training:
      outputs, _, _ = tf.compat.v1.nn.fused_batch_norm(
          inputs, self.gamma, self.beta, mean=self.moving_mean, variance=self.moving_variance,
          epsilon=self.epsilon, is_training=False)
      return outputs
    outputs, mean, variance = tf.compat.v1.nn.fused_batch_norm(
        inputs, self.gamma, self.beta, epsilon=self.epsilon, is_training=True)
    count = tf.cast(tf.size(inputs) // tf.size(variance), tf.float32)
    variance *= (count - 1.0) / count  # Without Bessel's correction, as the unfused layer.
    momentum = tf.convert_to_tensor(self.momentum)
    self.add_update(lambda: self._assign_moving_average(self.moving_mean, mean, momentum, None))
    self.add_update(lambda: self._assign_moving_average(self.moving_variance, variance,
                                                        momentum, None))
    return outputs


def _bn_relu(x, l2, name):
  x = BatchNormalization(
      momentum=_BN_MOMENTUM, epsilon=_BN_EPSILON, synchronized=True,
      beta_regularizer=keras.regularizers.l2(l2),
      gamma_regularizer=keras.regularizers.l2(l2), name=name)(x)
  return keras.layers.Activation("relu")(x)


def _basic_block(x, filters, strides, conv_l2, bn_l2, name, norm_bound):
  y = _bn_relu(x, bn_l2, f"{name}_bn_1")
  y = _conv(filters, 3, strides, conv_l2, f"{name}_conv_1", norm_bound)(y)
  y = _bn_relu(y, bn_l2, f"{name}_bn_2")
  y = _conv(filters, 3, 1, conv_l2, f"{name}_conv_2", norm_bound)(y)
  if x.shape[-1] != filters or strides != 1:
    x = _conv(filters, 1, strides, conv_l2, f"{name}_shortcut", norm_bound)(x)
  return keras.layers.Add()([x, y])


def wide_resnet(config: TrainerConfig, input_shape=IMAGE_SHAPE) -> keras.Model:
  """WRN-`depth`-`width_multiplier` returning logits."""
  blocks_per_group = (config.model.depth - 4) // 6
  bn_l2 = config.model.group_l2("bn_l2")
  inputs = keras.Input(shape=input_shape, name="image")
  norm_bound = config.model.spectral_norm_bound
  x = (PerImageCentering(name="per_image_centering")(inputs)
       if config.model.per_image_normalization == "centering" else inputs)
  x = _conv(16, 3, 1, config.model.group_l2("input_conv_l2"), "input_conv", norm_bound)(x)
  for group, (base_filters, strides) in enumerate([(16, 1), (32, 2), (64, 2)], start=1):
    conv_l2 = config.model.group_l2(f"group_{group}_conv_l2")
    filters = base_filters * config.model.width_multiplier
    for block in range(blocks_per_group):
      x = _basic_block(x, filters, strides if block == 0 else 1, conv_l2, bn_l2,
                       f"group_{group}_block_{block}", norm_bound)
  x = _bn_relu(x, bn_l2, "final_bn")
  # Under a mixed policy the pooling sum and the logits are float32 (so the softmax, loss and
  # metrics see full-precision logits); the convolutions run in the 16-bit compute type.
  x = keras.layers.GlobalAveragePooling2D(dtype="float32")(x)
  model = config.model
  regularizers = dict(
      kernel_regularizer=keras.regularizers.l2(model.group_l2("dense_kernel_l2")),
      bias_regularizer=keras.regularizers.l2(model.group_l2("dense_bias_l2")))
  if model.output_layer == "sngp":
    head = RandomFeatureGaussianProcess(
        model.num_classes, num_features=model.sngp_random_features,
        kernel_scale=model.sngp_kernel_scale, ridge_penalty=model.sngp_ridge_penalty,
        mean_field_factor=model.sngp_mean_field_factor, name="logits", **regularizers)
  else:
    head = keras.layers.Dense(model.num_classes, kernel_initializer="he_normal",
                              dtype="float32", name="logits", **regularizers)
  logits = head(x)
  return keras.Model(inputs, logits, name=f"wrn_{model.depth}_{model.width_multiplier}")
