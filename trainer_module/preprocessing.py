"""Transform's preprocessing_fn: decode, scale to [0, 1], normalise per channel.

The per-channel mean and standard deviation are full-pass statistics over the training split
(tft analyzers), baked into the transform graph that serving applies too.
"""
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module.features import IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY

_MIN_STD = 1e-6  # A constant channel normalises to 0 instead of dividing by zero.


def decode_images(encoded: tf.Tensor) -> tf.Tensor:
  """A batch of PNG/JPEG bytes -> float32 [batch, 32, 32, 3] in [0, 1]."""

  def decode(image_bytes):
    image = tf.io.decode_image(image_bytes, channels=IMAGE_SHAPE[-1], expand_animations=False)
    return tf.ensure_shape(image, IMAGE_SHAPE)

  encoded = tf.reshape(encoded, [-1])
  images = tf.map_fn(decode, encoded, fn_output_signature=tf.TensorSpec(IMAGE_SHAPE, tf.uint8))
  return tf.cast(images, tf.float32) / 255.0


def normalize_per_channel(images: tf.Tensor) -> tf.Tensor:
  pixels = tf.reshape(images, [-1, IMAGE_SHAPE[-1]])
  mean = tft.mean(pixels, reduce_instance_dims=False)
  std = tf.sqrt(tft.var(pixels, reduce_instance_dims=False))
  return (images - mean) / tf.maximum(std, _MIN_STD)


def preprocessing_fn(inputs, custom_config=None):
  """Raw {image, label, key} -> {image: normalised float32 [32, 32, 3], label: int64}."""
  del custom_config  # Carries the trainer_module fingerprint (cache key); AugMix options later.
  images = decode_images(inputs[IMAGE_KEY])
  return {
      IMAGE_KEY: normalize_per_channel(images),
      LABEL_KEY: tf.reshape(inputs[LABEL_KEY], [-1]),
  }
