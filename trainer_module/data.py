"""tf.data input pipelines over Transform's output (gzipped TFRecords of tf.Examples)."""
from typing import Mapping, Optional, Sequence

import tensorflow as tf

from trainer_module import augmix
from trainer_module.config import TrainerConfig
from trainer_module.features import (AUGMIX_VIEWS_KEY, CHANNEL_MEAN_KEY, CHANNEL_STD_KEY,
                                     EXAMPLE_KEY, IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY)
from trainer_module.preprocessing import denormalize_to_uint8, normalize

_SHUFFLE_BUFFER = 10_000
# TensorFlow's global seed when the run's seed is 0 (set_run_seeds): nonzero modulo 2**31 - 1,
# which TensorFlow takes seeds modulo, and no seed a user is likely to pass.
_GLOBAL_SEED_FOR_ZERO = 2**31 - 2


def set_run_seeds(seed: int) -> None:
  """Python's, numpy's and TensorFlow's global seeds, as keras.utils.set_random_seed sets them,
  except TensorFlow's for seed 0: TensorFlow compares the (global, op) seed pair with (0, 0) in
  Python (tensorflow/python/framework/random_seed.py, get_seed), which fails on
  training_batches' per-epoch tensor seed when the global seed is 0."""
  import tf_keras as keras
  keras.utils.set_random_seed(seed)
  if seed == 0:
    tf.random.set_seed(_GLOBAL_SEED_FOR_ZERO)


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


def _replica_slice(global_batch_size: int, input_context) -> tuple:
  """(first, size, per_replica): this input pipeline's part of every global batch.

  Replica r of the whole job takes examples [r * per_replica, (r + 1) * per_replica), so the
  examples of a step are the same whatever the number of workers and devices.
  """
  if input_context is None:
    return 0, global_batch_size, global_batch_size
  per_replica = input_context.get_per_replica_batch_size(global_batch_size)
  local_replicas = input_context.num_replicas_in_sync // input_context.num_input_pipelines
  size = local_replicas * per_replica
  return input_context.input_pipeline_id * size, size, per_replica


def _without_autotuning(batches: tf.data.Dataset) -> tf.data.Dataset:
  """The pipeline without tf.data's autotuning thread, which sleeps up to 60 s between tunings:
  releasing the iterator could wait for it to wake, 3-55 s after 49 of 110 logged trainings
  (bench/README.md, "The Trainer's inputs run without tf.data's autotuning"). AUTOTUNE
  parallelism stays at its start, min(16, cores); prefetch buffers keep their own autotuner."""
  options = tf.data.Options()
  options.autotune.enabled = False
  return batches.with_options(options)


def _split_for_replicas(batches: tf.data.Dataset, global_batch_size: int,
                        input_context) -> tf.data.Dataset:
  """Global batches of tuples -> this pipeline's per-replica batches, in replica order."""
  first, size, per_replica = _replica_slice(global_batch_size, input_context)
  if per_replica == global_batch_size:
    return batches
  if size < global_batch_size:
    batches = batches.map(lambda *parts: tuple(part[first:first + size] for part in parts))
  return batches.unbatch().batch(per_replica, drop_remainder=True)


def training_batches(file_patterns: Sequence[str], feature_spec: Mapping,
                     config: TrainerConfig, global_batch_size: Optional[int] = None,
                     start_example: int = 0, input_context=None) -> tf.data.Dataset:
  """(images, views, labels) batches forever. views is [batch, num_views, 32, 32, 3]:
  epoch e reads view set e mod augmix_view_sets written by Transform, or makes them here
  (augmix_online); either way normalised here with Transform's channel statistics.

  Epoch e is shuffled with seed (the config's seed, e), so the order is the same on every run, and
  the stream can start at any example: `start_example` is where a resumed run left off.
  With `input_context` (distribute_datasets_from_function) the batches are this worker's
  replicas' slices of the global batches.
  """
  global_batch_size = global_batch_size or config.training.per_core_batch_size
  views_online = config.augmentation.augmix_online and config.augmentation.num_views > 0
  keys = [IMAGE_KEY, LABEL_KEY]
  if config.augmentation.num_views:
    keys += [EXAMPLE_KEY if views_online else AUGMIX_VIEWS_KEY, CHANNEL_MEAN_KEY, CHANNEL_STD_KEY]
  spec = _spec(feature_spec, keys)
  records = _records(file_patterns)
  params = augmix.params_from_options(config.transform_options())
  start_epoch, skip = (divmod(start_example, count_examples(file_patterns)) if start_example
                       else (0, 0))

  def one_epoch(epoch):
    seed = tf.cast(config.training.seed, tf.int64) * 1_000_003 + epoch
    shuffled = records.shuffle(_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=False)
    return shuffled.map(lambda record: (record, epoch))

  def to_batch(serialized, epochs):
    features = tf.io.parse_example(serialized, spec)
    images, labels = features[IMAGE_KEY], features[LABEL_KEY]
    if not config.augmentation.num_views:
      return images, tf.zeros(tf.concat([tf.shape(images)[:1], [0], IMAGE_SHAPE], 0)), labels
    mean = features[CHANNEL_MEAN_KEY][:, tf.newaxis, tf.newaxis, :]  # [batch, 1, 1, 3]
    std = features[CHANNEL_STD_KEY][:, tf.newaxis, tf.newaxis, :]
    if views_online:
      originals = denormalize_to_uint8(images, mean, std)
      views01 = augmix.augmix_views(originals, features[EXAMPLE_KEY], config.training.seed,
                                    config.augmentation.num_views, params, epochs=epochs)
    else:
      views01 = augmix.decode_view_set(features[AUGMIX_VIEWS_KEY], epochs,
                                       config.augmentation.num_views, IMAGE_SHAPE)
    views = normalize(views01, mean[:, tf.newaxis], std[:, tf.newaxis])  # Over the view axis.
    return images, views, labels

  stream = tf.data.Dataset.counter(start_epoch).flat_map(one_epoch).skip(skip)
  batches = _split_for_replicas(stream.batch(global_batch_size, drop_remainder=True),
                                global_batch_size, input_context)
  return _without_autotuning(batches.map(to_batch, num_parallel_calls=tf.data.AUTOTUNE)
                             .prefetch(tf.data.AUTOTUNE))


def eval_batches(file_patterns: Sequence[str], feature_spec: Mapping, global_batch_size: int,
                 input_context=None) -> tf.data.Dataset:
  """(images, labels, weights) batches of the clean images, one pass.

  The last batch is padded to full size with weight 0 (label -1), so every replica gets a
  batch of the same static shape on every step (TPUs need that; workers must not run out of
  data at different steps).
  """
  spec = _spec(feature_spec, [IMAGE_KEY, LABEL_KEY])

  def padded(serialized):
    features = tf.io.parse_example(serialized, spec)
    missing = global_batch_size - tf.shape(serialized)[0]
    images = tf.pad(features[IMAGE_KEY], [[0, missing], [0, 0], [0, 0], [0, 0]])
    labels = tf.pad(features[LABEL_KEY], [[0, missing]], constant_values=-1)
    images = tf.ensure_shape(images, [global_batch_size, *IMAGE_SHAPE])
    labels = tf.ensure_shape(labels, [global_batch_size])
    return images, labels, tf.cast(labels >= 0, tf.float32)

  batches = _records(file_patterns).batch(global_batch_size).map(
      padded, num_parallel_calls=tf.data.AUTOTUNE)
  return _without_autotuning(_split_for_replicas(batches, global_batch_size, input_context)
                             .prefetch(tf.data.AUTOTUNE))
