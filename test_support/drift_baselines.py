"""The artifacts a DriftCheck reads (Examples, statistics, schema), made directly from the
digits, and a drift baseline of them, as the DriftCheck writes one for the Pusher to keep with
a pushed version (components/drift_check.py, components/drift_baseline.py)."""
import os
import shutil
from typing import Tuple

import numpy as np

from test_support import image_folders

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def digits(count: int = 700):
  """(32x32x3 images, labels) of the first `count` digits bundled with scikit-learn."""
  return image_folders.digit_images(count)


def examples(path, images, labels, darker: float = 1.0):
  """An Examples artifact: Split-train and Split-eval (every third image), gzipped TFRecords
  of tf.Examples keyed digits-NNNN; `darker` scales the pixels."""
  import tensorflow as tf
  from tfx.types import standard_artifacts
  from components import image_sources
  artifact = standard_artifacts.Examples()
  artifact.uri = str(path)
  artifact.split_names = '["train", "eval"]'
  writers = {}
  for split in ("train", "eval"):
    os.makedirs(os.path.join(artifact.uri, f"Split-{split}"), exist_ok=True)
    writers[split] = tf.io.TFRecordWriter(os.path.join(artifact.uri, f"Split-{split}", "data.gz"),
                                          options="GZIP")
  for index, (image, label) in enumerate(zip(images, labels)):
    image = np.clip(np.round(image * darker), 0, 255).astype(np.uint8)
    split = "eval" if index % 3 == 0 else "train"
    writers[split].write(image_sources.make_example(
        f"digits-{index:04d}", image_sources.encode_png(image), int(label)).SerializeToString())
  for writer in writers.values():
    writer.close()
  return artifact


def statistics(path):
  """An ExampleStatistics artifact whose train split has (empty) statistics."""
  from tensorflow_metadata.proto.v0 import statistics_pb2
  from tfx.types import standard_artifacts
  artifact = standard_artifacts.ExampleStatistics()
  artifact.uri = str(path)
  os.makedirs(os.path.join(artifact.uri, "Split-train"))
  stats = statistics_pb2.DatasetFeatureStatisticsList()
  stats.datasets.add(num_examples=1)
  with open(os.path.join(artifact.uri, "Split-train", "FeatureStats.pb"), "wb") as f:
    f.write(stats.SerializeToString())
  return artifact


def schema(path):
  """A Schema artifact holding the project's curated schema."""
  from tfx.types import standard_artifacts
  artifact = standard_artifacts.Schema()
  artifact.uri = str(path)
  os.makedirs(artifact.uri)
  shutil.copy(os.path.join(PROJECT_DIR, "components", "schema.pbtxt"),
              os.path.join(artifact.uri, "schema.pbtxt"))
  return artifact


def digits_baseline(workdir: str, count: int = 600) -> Tuple[str, int]:
  """A drift baseline of the first `count` digits, written by the DriftCheck's own code with
  nothing in production (as a first run writes it); returns (its directory, the number of
  train examples it records)."""
  from components import drift, drift_baseline, drift_check
  from pipeline.config import DriftConfig
  defaults = DriftConfig()
  images, labels = digits(count)
  result = drift_check.check(
      examples(os.path.join(workdir, "examples"), images, labels).uri,
      statistics(os.path.join(workdir, "statistics")).uri,
      schema(os.path.join(workdir, "schema")).uri, None, os.path.join(workdir, "drift"),
      drift.Limits(defaults.max_category_distance, defaults.max_image_divergence,
                   defaults.drift_p_value), defaults.drift_sample_size)
  if result["status"] != drift_baseline.NO_PRODUCTION:
    raise RuntimeError(f"the digits' baseline was written as {result['status']!r}")
  directory = os.path.join(workdir, "drift", drift_baseline.OUTPUT_DIR)
  return directory, drift_baseline.read_info(directory)["train_examples"]
