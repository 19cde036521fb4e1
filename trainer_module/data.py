"""tf.data input pipelines over Transform's output (gzipped TFRecords of tf.Examples)."""
from typing import Mapping, Sequence

import tensorflow as tf

from trainer_module import augmix
from trainer_module.config import TrainerConfig
from trainer_module.features import (AUGMIX_VIEWS_KEY, CHANNEL_MEAN_KEY, CHANNEL_STD_KEY,
                                     EXAMPLE_KEY, IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY)
from trainer_module.preprocessing import denormalize_to_uint8, normalize

_SHUFFLE_BUFFER = 10_000


def _files(file_patterns: Sequence[str]) -> list:
  files = sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))
  if not files:
    raise ValueError(f"No transformed examples match {list(file_patterns)}.")
  return files


def _records(file_patterns: Sequence[str]) -> tf.data.Dataset:
  return tf.data.TFRecordDataset(_files(file_patterns), compression_type="GZIP")


def count_examples(file_patterns: Sequence[str]) -> int:
  return int(_records(file_patterns).reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))


def _spec(feature_spec: Mapping, keys) -> dict:
  missing = [key for key in keys if key not in feature_spec]
  if missing:
    raise ValueError(f"Transform's output lacks {missing}: was it run with this config's "
                     "AugMix options?")
  return {key: feature_spec[key] for key in keys}


def training_batches(file_patterns: Sequence[str], feature_spec: Mapping,
                     config: TrainerConfig) -> tf.data.Dataset:
  """(images, views, labels) batches forever. views is [batch, config.num_views, 32, 32, 3]:
  written by Transform, or made here with a fresh seed each epoch (augmix_online).

  Epoch e is shuffled with seed (config.seed, e), so the order is the same on every run.
  """
  views_online = config.augmix_online and config.num_views > 0
  keys = [IMAGE_KEY, LABEL_KEY]
  if views_online:
    keys += [EXAMPLE_KEY, CHANNEL_MEAN_KEY, CHANNEL_STD_KEY]
  elif config.num_views:
    keys.append(AUGMIX_VIEWS_KEY)
  spec = _spec(feature_spec, keys)
  records = _records(file_patterns)
  params = augmix.params_from_options(config.transform_options())

  def one_epoch(epoch):
    seed = tf.cast(config.seed, tf.int64) * 1_000_003 + epoch
    shuffled = records.shuffle(_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=False)
    return shuffled.map(lambda record: (record, epoch))

  def to_batch(serialized, epochs):
    features = tf.io.parse_example(serialized, spec)
    images = features[IMAGE_KEY]
    if views_online:
      mean = features[CHANNEL_MEAN_KEY][:, tf.newaxis, tf.newaxis, :]  # [batch, 1, 1, 3]
      std = features[CHANNEL_STD_KEY][:, tf.newaxis, tf.newaxis, :]
      originals = denormalize_to_uint8(images, mean, std)
      views01 = augmix.augmix_views(originals, features[EXAMPLE_KEY], config.seed,
                                    config.num_views, params, epochs=epochs)
      views = normalize(views01, mean[:, tf.newaxis], std[:, tf.newaxis])  # Over the view axis.
    elif config.num_views:
      views = features[AUGMIX_VIEWS_KEY]
    else:
      views = tf.zeros(tf.concat([tf.shape(images)[:1], [0], IMAGE_SHAPE], 0))
    return images, views, features[LABEL_KEY]

  batches = (tf.data.Dataset.counter().flat_map(one_epoch)
             .batch(config.per_core_batch_size, drop_remainder=True))
  return batches.map(to_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def eval_batches(file_patterns: Sequence[str], feature_spec: Mapping,
                 batch_size: int) -> tf.data.Dataset:
  """(images, labels) batches of the clean images, one pass."""
  spec = _spec(feature_spec, [IMAGE_KEY, LABEL_KEY])
  batches = _records(file_patterns).batch(batch_size)
  features = batches.map(lambda serialized: tf.io.parse_example(serialized, spec),
                         num_parallel_calls=tf.data.AUTOTUNE)
  return features.map(lambda f: (f[IMAGE_KEY], f[LABEL_KEY])).prefetch(tf.data.AUTOTUNE)
