"""tf.data input pipelines over Transform's output (gzipped TFRecords of tf.Examples)."""
from typing import Mapping, Sequence

import tensorflow as tf

from trainer_module.features import IMAGE_KEY, LABEL_KEY

_SHUFFLE_BUFFER = 10_000


def _files(file_patterns: Sequence[str]) -> list:
  files = sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))
  if not files:
    raise ValueError(f"No transformed examples match {list(file_patterns)}.")
  return files


def count_examples(file_patterns: Sequence[str]) -> int:
  records = tf.data.TFRecordDataset(_files(file_patterns), compression_type="GZIP")
  return int(records.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))


def transformed_dataset(file_patterns: Sequence[str], feature_spec: Mapping,
                        batch_size: int, training: bool, seed: int) -> tf.data.Dataset:
  """(image, label) batches; training data is shuffled each epoch and repeats forever."""
  records = tf.data.TFRecordDataset(_files(file_patterns), compression_type="GZIP")
  if training:
    records = records.shuffle(_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True).repeat()
  batches = records.batch(batch_size, drop_remainder=training)
  features = batches.map(lambda serialized: tf.io.parse_example(serialized, feature_spec),
                         num_parallel_calls=tf.data.AUTOTUNE)
  return features.map(lambda f: (f[IMAGE_KEY], f[LABEL_KEY])).prefetch(tf.data.AUTOTUNE)
