"""Stops the pipeline on bad data, before it costs training time.

ExampleValidator records anomalies against the schema (missing features, labels out of range)
but does not stop anything, and the schema cannot say "a 32x32 RGB PNG". This component fails
the run when ExampleValidator found anomalies or when an image does not decode to the expected
shape, naming the split, the example key, the file and the problem.
"""

import json
import os
from typing import Iterable, List, Optional, Tuple

import apache_beam as beam
import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx.dsl.component.experimental.annotations import (BeamComponentParameter, InputArtifact,
                                                         OutputArtifact)
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.experimental import simple_artifacts

from components import image_sources
from trainer_module.features import EXAMPLE_KEY, IMAGE_KEY, IMAGE_SHAPE

MAX_REPORTED_PROBLEMS = 20
REPORT_FILE = "validation_report.json"


class DataValidationError(ValueError):
  """Raised with every problem found, so one run names them all."""


def image_problem(example: tf.train.Example) -> Optional[str]:
  """Why an example's image is unusable, or None when it decodes to IMAGE_SHAPE."""
  images = example.features.feature[IMAGE_KEY].bytes_list.value
  if len(images) != 1:
    return f"feature '{IMAGE_KEY}' has {len(images)} values, expected 1"
  try:
    image = image_sources.decode_png(images[0])
  except Exception as error:  # PIL raises several types for garbage bytes.
    return f"'{IMAGE_KEY}' is not a PNG image ({error})"
  if image.shape != IMAGE_SHAPE:
    return f"'{IMAGE_KEY}' has shape {image.shape}, expected {IMAGE_SHAPE}"
  return None


def example_key(example: tf.train.Example) -> str:
  keys = example.features.feature[EXAMPLE_KEY].bytes_list.value
  return keys[0].decode("utf-8", "replace") if keys else "<no key>"


def _check(file_and_record: Tuple[str, bytes], split: str) -> Iterable[Tuple[str, str, str, str]]:
  filename, serialized = file_and_record
  example = tf.train.Example.FromString(serialized)
  problem = image_problem(example)
  if problem:
    yield (split, example_key(example), os.path.basename(filename), problem)


def schema_anomalies(anomalies_uri: str, split: str) -> List[str]:
  """ExampleValidator's anomalies for one split, as readable lines."""
  path = os.path.join(anomalies_uri, f"Split-{split}", "SchemaDiff.pb")
  anomalies = anomalies_pb2.Anomalies()
  anomalies.ParseFromString(tf.io.gfile.GFile(path, "rb").read())
  lines = [f"split '{split}', feature '{name}': {info.short_description}: {info.description}"
           for name, info in sorted(anomalies.anomaly_info.items())]
  if anomalies.HasField("dataset_anomaly_info"):
    info = anomalies.dataset_anomaly_info
    lines.append(f"split '{split}': {info.short_description}: {info.description}")
  return lines


def format_problems(schema_problems: List[str], image_problems: List[Tuple[str, str, str, str]],
                    num_bad_images: int) -> str:
  lines = ["Bad input data; the pipeline stops before Transform and Trainer."]
  lines += [f"  - schema anomaly: {problem}" for problem in schema_problems]
  lines += [f"  - split '{split}', example key '{key}' (file {filename}): {problem}"
            for split, key, filename, problem in image_problems]
  if num_bad_images > len(image_problems):
    lines.append(f"  ... and {num_bad_images - len(image_problems)} more bad images.")
  return "\n".join(lines)


@component(use_beam=True)
def ValidationGate(
    examples: InputArtifact[standard_artifacts.Examples],
    anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
    report: OutputArtifact[simple_artifacts.Metrics],
    beam_pipeline: BeamComponentParameter[beam.Pipeline] = None,
) -> None:
  """Fails with DataValidationError when any split holds an anomaly or an unusable image."""
  splits = artifact_utils.decode_split_names(examples.split_names)
  schema_problems = [line for split in splits for line in schema_anomalies(anomalies.uri, split)]
  samples_path = os.path.join(report.uri, "bad_images")
  counts_path = os.path.join(report.uri, "bad_image_count")
  with beam_pipeline as pipeline:
    bad = []
    for split in splits:
      pattern = os.path.join(examples.uri, f"Split-{split}", "*")
      bad.append(pipeline
                 | f"Files[{split}]" >> beam.Create(sorted(tf.io.gfile.glob(pattern)))
                 | f"Read[{split}]" >> beam.io.ReadAllFromTFRecord(with_filename=True)
                 | f"Check[{split}]" >> beam.FlatMap(_check, split))
    bad = bad | "Flatten" >> beam.Flatten()
    (bad | "First" >> beam.combiners.Top.Smallest(MAX_REPORTED_PROBLEMS)
     | "Json" >> beam.Map(json.dumps)
     | "WriteFirst" >> beam.io.WriteToText(samples_path, shard_name_template=""))
    (bad | "Count" >> beam.combiners.Count.Globally()
     | "WriteCount" >> beam.io.WriteToText(counts_path, shard_name_template=""))
  image_problems = [tuple(p) for p in json.loads(tf.io.gfile.GFile(samples_path).read())]
  num_bad_images = int(tf.io.gfile.GFile(counts_path).read())
  summary = {"splits": splits, "schema_anomalies": schema_problems,
             "bad_images": image_problems, "num_bad_images": num_bad_images}
  with tf.io.gfile.GFile(os.path.join(report.uri, REPORT_FILE), "w") as f:
    json.dump(summary, f, indent=2)
  if schema_problems or num_bad_images:
    raise DataValidationError(format_problems(schema_problems, image_problems, num_bad_images))
