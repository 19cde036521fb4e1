"""SNGP's output layer (Liu et al., NeurIPS 2020): a random-feature Gaussian process whose logits
soften with the input's kernel distance from the training data, following edward2 (PyPI's
edward2 needs tensorflow-probability). docs/robustness.md, "An SNGP output layer"."""
import math

import tensorflow as tf
import tf_keras as keras

_LAYER_NORM_EPSILON = 1e-3  # tf_keras' LayerNormalization default, which edward2 uses.


@keras.saving.register_keras_serializable(package="trainer_module")
class RandomFeatureGaussianProcess(keras.layers.Layer):
  """Logits of a random-feature GP. Training calls (training=True) return the posterior mode's
  logits and add the batch's features to the Laplace precision; other calls return the
  mean-field logits, logits / sqrt(1 + mean_field_factor * var(x)), var(x) the GP's predictive
  variance. Computes in float32 under every policy (the precision is a sum over an epoch)."""

  def __init__(self, units: int, num_features: int = 128, kernel_scale: float = 128.0,
               ridge_penalty: float = 1.0, mean_field_factor: float = math.pi / 8,
               kernel_regularizer=None, bias_regularizer=None, **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    if num_features < 1 or kernel_scale <= 0 or ridge_penalty <= 0 or mean_field_factor < 0:
      raise ValueError(f"{self.name}: needs num_features >= 1, kernel_scale > 0, "
                       "ridge_penalty > 0 and mean_field_factor >= 0.")
    self.units, self.num_features = units, num_features
    self.kernel_scale, self.ridge_penalty = kernel_scale, ridge_penalty
    self.mean_field_factor = mean_field_factor
    self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
    self.bias_regularizer = keras.regularizers.get(bias_regularizer)

  def build(self, input_shape):
    width = int(input_shape[-1])
    self.norm_scale = self.add_weight(name="input_norm_scale", shape=(width,),
                                      initializer="ones")
    self.norm_offset = self.add_weight(name="input_norm_offset", shape=(width,),
                                       initializer="zeros")
    # The fixed random Fourier map of an RBF kernel of length-scale sqrt(kernel_scale).
    self.random_projection = self.add_weight(
        name="random_projection", shape=(width, self.num_features), trainable=False,
        initializer=keras.initializers.RandomNormal(stddev=1.0))
    self.random_phase = self.add_weight(
        name="random_phase", shape=(self.num_features,), trainable=False,
        initializer=keras.initializers.RandomUniform(0.0, 2.0 * math.pi))
    self.kernel = self.add_weight(name="kernel", shape=(self.num_features, self.units),
                                  initializer="he_normal", regularizer=self.kernel_regularizer)
    self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros",
                                regularizer=self.bias_regularizer)
    self.precision = self.add_weight(
        name="precision", shape=(self.num_features, self.num_features), trainable=False,
        initializer=keras.initializers.Identity(self.ridge_penalty),
        aggregation=tf.VariableAggregation.SUM)
    super().build(input_shape)

  def random_features(self, inputs: tf.Tensor) -> tf.Tensor:
    """[batch, num_features] phi(x) = cos(layer_norm(x) W / sqrt(kernel_scale) + b):
    phi(x) . phi(y) approximates D / 2 exp(-|x - y|^2 / (2 kernel_scale))."""
    inputs = tf.cast(inputs, tf.float32)
    mean, variance = tf.nn.moments(inputs, axes=[-1], keepdims=True)
    normalised = ((inputs - mean) * tf.math.rsqrt(variance + _LAYER_NORM_EPSILON)
                  * self.norm_scale + self.norm_offset)
    return tf.cos(tf.matmul(normalised, self.random_projection) / math.sqrt(self.kernel_scale)
                  + self.random_phase)

  def variance(self, features: tf.Tensor) -> tf.Tensor:
    """[batch] ridge * phi^T inv(precision) phi, by a Cholesky solve."""
    cholesky = tf.linalg.cholesky(self.precision)
    solved = tf.linalg.triangular_solve(cholesky, tf.transpose(features), lower=True)
    return self.ridge_penalty * tf.reduce_sum(tf.square(solved), axis=0)

  def reset_precision(self) -> None:
    """The precision back to ridge I: called at the start of every training epoch, so the
    served covariance is the last epoch's."""
    self.precision.assign(self.ridge_penalty * tf.eye(self.num_features))

  def _train_logits(self, features, logits):
    update = self.precision.assign_add(tf.matmul(features, features, transpose_a=True))
    with tf.control_dependencies([update]):
      return tf.identity(logits)

  def mean_field_logits(self, features, logits):
    return logits / tf.sqrt(1.0 + self.mean_field_factor * self.variance(features))[:, None]

  def call(self, inputs, training=None):
    features = self.random_features(inputs)
    logits = tf.matmul(features, self.kernel) + self.bias
    return tf.__internal__.smart_cond.smart_cond(
        False if training is None else training,
        lambda: self._train_logits(features, logits),
        lambda: self.mean_field_logits(features, logits))

  def get_config(self):
    return {**super().get_config(), "units": self.units, "num_features": self.num_features,
            "kernel_scale": self.kernel_scale, "ridge_penalty": self.ridge_penalty,
            "mean_field_factor": self.mean_field_factor,
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer)}


def gp_layers(model: keras.Model):
  """The model's GP output layers (none for a dense head)."""
  return [layer for layer in model.layers if isinstance(layer, RandomFeatureGaussianProcess)]
