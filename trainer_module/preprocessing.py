"""Transform's preprocessing_fn: decode, scale to [0, 1], normalise per channel by the train
split's full-pass statistics (baked into the serving graph too), and AugMix view sets made from
the example key, which serving does not feed, so TFT prunes them from the serving graph."""
import tensorflow as tf
import tensorflow_transform as tft

from trainer_module import augmix, image_format
from trainer_module.features import (AUGMIX_VIEWS_KEY, CHANNEL_MEAN_KEY, CHANNEL_STD_KEY,
                                     EXAMPLE_KEY, IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY)

# Transform's key in the TFX custom_config the pipeline hands it: TrainerConfig.transform_options().
TRANSFORM_OPTIONS_KEY = "transform"

_MIN_STD = 1e-6  # A constant channel normalises to 0 instead of dividing by zero.

# Transform must trace preprocessing_fn as a TF1 graph: only then does TFT apply it at serving
# as a pruned function that holds nothing but what the fed `image` needs. A TF2 transform
# function is called whole, with dummy values for unfed inputs, so AugMix would run (and sit
# in the graph) on every serving batch.
FORCE_TF_COMPAT_V1 = True
TRAIN_KEYS = "train_keys"  # The vocabulary of the analysed (train) split's example keys.


def decode_images(encoded: tf.Tensor) -> tf.Tensor:
  """A batch of JPEG/PNG bytes of any size -> uint8 [batch, 32, 32, 3], converted as the
  image_dir ingest converts (image_format.decode_to_model_input): stored examples are 32x32
  already, served images are resized here."""
  encoded = tf.reshape(encoded, [-1])
  return tf.map_fn(image_format.decode_to_model_input, encoded,
                   fn_output_signature=tf.TensorSpec(IMAGE_SHAPE, tf.uint8))


def normalize(images01: tf.Tensor, mean: tf.Tensor, std: tf.Tensor) -> tf.Tensor:
  """[0, 1] images -> zero mean, unit variance per channel (mean, std broadcast on channels)."""
  return (images01 - mean) / tf.maximum(std, _MIN_STD)


def denormalize_to_uint8(images: tf.Tensor, mean: tf.Tensor, std: tf.Tensor) -> tf.Tensor:
  """Inverts `normalize` exactly for images that came from uint8."""
  images01 = images * tf.maximum(std, _MIN_STD) + mean
  return tf.cast(tf.clip_by_value(tf.round(images01 * 255.0), 0.0, 255.0), tf.uint8)


def _train_view_sets(images, keys, options):
  """View sets (augmix.encode_view_sets) for training examples; empty strings for the others.

  preprocessing_fn is not told the split. The Transform component analyses the train split
  only (SplitsConfig(analyze=["train"])), so a vocabulary analyzer over the keys knows exactly
  the training keys (keys are unique per example): AugMix runs only on those, and an eval
  example costs the lookup and a few empty bytes.
  """
  index = tft.compute_and_apply_vocabulary(keys, default_value=-1, vocab_filename=TRAIN_KEYS,
                                           file_format="tfrecord_gzip")  # Keys are any bytes.
  train_rows = tf.where(index >= 0)
  encoded = augmix.encode_view_sets(
      tf.gather_nd(images, train_rows), tf.gather_nd(keys, train_rows), options["seed"],
      options["num_views"], options["view_sets"], augmix.params_from_options(options))
  empty = tf.fill(tf.stack([tf.shape(keys)[0], options["view_sets"]]), "")
  return tf.tensor_scatter_nd_update(empty, train_rows, encoded)


def preprocessing_fn(inputs, custom_config=None):
  """Raw {image, label, key} -> {image, label[, augmix_views | key][, channel_mean, channel_std]}.

  custom_config[TRANSFORM_OPTIONS_KEY] is TrainerConfig.transform_options(): how many AugMix
  views to write per set (`num_views`) and how many sets (`view_sets`, compact: see
  augmix.encode_view_sets), or whether to hand the Trainer the key to make them each epoch
  (`emit_augmix_inputs`).
  """
  options = (custom_config or {}).get(TRANSFORM_OPTIONS_KEY, {})
  images = decode_images(inputs[IMAGE_KEY])
  images01 = tf.cast(images, tf.float32) / 255.0
  # float64 sums, rounded once: the statistics (and every normalised value) do not depend on
  # how Beam splits the data across workers.
  pixels = tf.reshape(tf.cast(images, tf.float64) / 255.0, [-1, IMAGE_SHAPE[-1]])
  mean = tf.cast(tft.mean(pixels, reduce_instance_dims=False), tf.float32)
  std = tf.cast(tf.sqrt(tft.var(pixels, reduce_instance_dims=False)), tf.float32)
  outputs = {
      IMAGE_KEY: normalize(images01, mean, std),
      LABEL_KEY: tf.reshape(inputs[LABEL_KEY], [-1]),
  }
  if options.get("num_views", 0) > 0:
    keys = tf.reshape(inputs[EXAMPLE_KEY], [-1])
    outputs[AUGMIX_VIEWS_KEY] = _train_view_sets(images, keys, options)
  if options.get("emit_augmix_inputs", False):
    outputs[EXAMPLE_KEY] = tf.reshape(inputs[EXAMPLE_KEY], [-1])
  if options.get("num_views", 0) > 0 or options.get("emit_augmix_inputs", False):
    # The Trainer normalises views (read or made) with the same statistics as the images.
    per_example = tf.stack([tf.shape(images)[0], IMAGE_SHAPE[-1]])
    outputs[CHANNEL_MEAN_KEY] = tf.broadcast_to(mean, per_example)
    outputs[CHANNEL_STD_KEY] = tf.broadcast_to(std, per_example)
  return outputs
