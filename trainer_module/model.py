"""Wide ResNet (Zagoruyko & Komodakis 2016) as in Uncertainty Baselines' CIFAR recipe.

Pre-activation basic blocks (BN-ReLU-conv, twice), three groups of (depth - 4) / 6 blocks with
16k, 32k and 64k filters, bias-free He-initialised convolutions, global average pooling and a
dense head producing logits. Each parameter group carries its own L2 coefficient.
"""
import tf_keras as keras

from trainer_module.config import TrainerConfig
from trainer_module.features import IMAGE_SHAPE

_BN_MOMENTUM = 0.9
_BN_EPSILON = 1e-5


def _conv(filters, kernel_size, strides, l2):
  return keras.layers.Conv2D(
      filters, kernel_size, strides=strides, padding="same", use_bias=False,
      kernel_initializer="he_normal", kernel_regularizer=keras.regularizers.l2(l2))


def _bn_relu(x, l2):
  # Synchronized: statistics over the global batch across replicas, so N devices compute what
  # one device computes on the same batch. (It is also the unfused kernel on one device: the
  # fused one would update the moving variance with Bessel's correction, the unfused without.)
  x = keras.layers.BatchNormalization(
      momentum=_BN_MOMENTUM, epsilon=_BN_EPSILON, synchronized=True,
      beta_regularizer=keras.regularizers.l2(l2),
      gamma_regularizer=keras.regularizers.l2(l2))(x)
  return keras.layers.Activation("relu")(x)


def _basic_block(x, filters, strides, conv_l2, bn_l2):
  y = _bn_relu(x, bn_l2)
  y = _conv(filters, 3, strides, conv_l2)(y)
  y = _bn_relu(y, bn_l2)
  y = _conv(filters, 3, 1, conv_l2)(y)
  if x.shape[-1] != filters or strides != 1:
    x = _conv(filters, 1, strides, conv_l2)(x)
  return keras.layers.Add()([x, y])


def wide_resnet(config: TrainerConfig, input_shape=IMAGE_SHAPE) -> keras.Model:
  """WRN-`depth`-`width_multiplier` returning logits."""
  blocks_per_group = (config.depth - 4) // 6
  bn_l2 = config.group_l2("bn_l2")
  inputs = keras.Input(shape=input_shape, name="image")
  x = _conv(16, 3, 1, config.group_l2("input_conv_l2"))(inputs)
  for group, (base_filters, strides) in enumerate([(16, 1), (32, 2), (64, 2)], start=1):
    conv_l2 = config.group_l2(f"group_{group}_conv_l2")
    filters = base_filters * config.width_multiplier
    for block in range(blocks_per_group):
      x = _basic_block(x, filters, strides if block == 0 else 1, conv_l2, bn_l2)
  x = _bn_relu(x, bn_l2)
  # Under a mixed policy the pooling sum and the logits are float32 (so the softmax, loss and
  # metrics see full-precision logits); the convolutions run in the 16-bit compute type.
  x = keras.layers.GlobalAveragePooling2D(dtype="float32")(x)
  logits = keras.layers.Dense(
      config.num_classes, kernel_initializer="he_normal",
      kernel_regularizer=keras.regularizers.l2(config.group_l2("dense_kernel_l2")),
      bias_regularizer=keras.regularizers.l2(config.group_l2("dense_bias_l2")),
      dtype="float32", name="logits")(x)
  return keras.Model(inputs, logits, name=f"wrn_{config.depth}_{config.width_multiplier}")
