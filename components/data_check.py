"""Stops the pipeline on bad data before it costs training time, naming split, key, file and
problem: ExampleValidator only records anomalies (docs/pipeline.md, "Bad input").
"""

import json
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam
import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2
from tfx.dsl.component.experimental.annotations import (BeamComponentParameter, InputArtifact,
                                                         OutputArtifact, Parameter)
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.experimental import simple_artifacts
from tfx.utils import io_utils

from components import image_sources, tfrecord_check
from components.tfrecord_check import schema_problem
from trainer_module import image_format
from trainer_module.features import IMAGE_KEY, IMAGE_SHAPE

# The step's id in runs, caches and compiled specs: its name before "gate" came to mean the
# deployment decision alone.
STEP_ID = "ValidationGate"
MAX_REPORTED_PROBLEMS = 20
REPORT_FILE = "validation_report.json"


class DataValidationError(ValueError):
  """Raised with every problem found, so one run names them all."""


def image_problem(example: tf.train.Example) -> Optional[str]:
  """Why an example's image is unusable, or None when it is image_format.ACCEPTED."""
  images = example.features.feature[IMAGE_KEY].bytes_list.value
  if len(images) != 1:
    return f"feature '{IMAGE_KEY}' has {len(images)} values, expected 1"
  header_problem = image_format.header_problem(images[0])
  if header_problem:
    return f"'{IMAGE_KEY}' {header_problem}"
  try:
    image = image_sources.decode_png(images[0])
  except Exception as error:  # PIL raises several types for garbage bytes.
    return f"'{IMAGE_KEY}' is not a PNG image ({error})"
  if image.shape != IMAGE_SHAPE:
    return f"'{IMAGE_KEY}' has shape {image.shape}, expected {IMAGE_SHAPE}"
  return None


# (split, example key, file(s), problem): one reported problem.
Problem = Tuple[str, str, str, str]


def _inspect(file_and_record: Tuple[str, bytes], split: str,
             anomalous_features: Sequence[schema_pb2.Feature]) -> Tuple[str, str, str,
                                                                         Optional[str]]:
  filename, serialized = file_and_record
  example = tf.train.Example.FromString(serialized)
  problem = schema_problem(example, anomalous_features) or image_problem(example)
  return split, tfrecord_check.example_id(example), os.path.basename(filename), problem


def key_problem(key: str, places: Iterable[Tuple[str, str]]) -> Optional[Problem]:
  """places: (split, file) of every example with this key; a problem unless there is one."""
  places = sorted(places)
  if len(places) < 2:
    return None
  splits = sorted({split for split, _ in places})
  files = ", ".join(f"{filename} in {split}" for split, filename in places)
  if len(splits) > 1:
    return (splits[0], key, files, f"key is in splits {', '.join(splits)}; a key must be in "
            "one split only")
  return (splits[0], key, files, f"key appears {len(places)} times in the split; keys must be "
          "unique")


def _read_anomalies(anomalies_uri: str, split: str) -> anomalies_pb2.Anomalies:
  path = os.path.join(anomalies_uri, f"Split-{split}", "SchemaDiff.pb")
  anomalies = anomalies_pb2.Anomalies()
  anomalies.ParseFromString(tf.io.gfile.GFile(path, "rb").read())
  return anomalies


def schema_anomalies(anomalies_uri: str, split: str) -> List[str]:
  """ExampleValidator's anomalies for one split, as readable lines."""
  anomalies = _read_anomalies(anomalies_uri, split)
  lines = [f"split '{split}', feature '{name}': {info.short_description}: {info.description}"
           for name, info in sorted(anomalies.anomaly_info.items())]
  if anomalies.HasField("dataset_anomaly_info"):
    info = anomalies.dataset_anomaly_info
    lines.append(f"split '{split}': {info.short_description}: {info.description}")
  return lines


def anomalous_features(anomalies_uri: str, split: str,
                       schema: schema_pb2.Schema) -> List[schema_pb2.Feature]:
  """The schema's features that ExampleValidator found anomalous in the split."""
  names = set(_read_anomalies(anomalies_uri, split).anomaly_info)
  return [feature for feature in schema.feature if feature.name in names]


def empty_splits(examples_uri: str, splits: Sequence[str]) -> List[str]:
  """A line per split without examples (a query-based source can give a split none; the
  TFRecord input of a local run was checked before the run started)."""
  problems = []
  for split in splits:
    problem = tfrecord_check.split_problem(os.path.join(examples_uri, f"Split-{split}"))
    if problem:
      problems.append(f"split '{split}' has no examples: {problem}")
  return problems


def size_problems(counts: Dict[str, int], min_train_examples: int,
                  min_eval_examples: int) -> List[str]:
  """A line per split too small for its use: train below one batch (the Trainer drops an
  incomplete batch, so it would take no step), eval below the minimum the gate judges on."""
  problems = []
  for split, minimum, why in (
      ("train", min_train_examples, "per_core_batch_size: the Trainer drops an incomplete "
       "batch, so it would take no step"),
      ("eval", min_eval_examples, "min_eval_examples: the gate does not judge a model on "
       "fewer")):
    if split in counts and counts[split] < minimum:
      problems.append(f"split '{split}' has {counts[split]} examples, fewer than {minimum} "
                      f"({why})")
  return problems


def in_user_files(problems: List[Problem], input_base: str) -> List[Problem]:
  """The problems with the user's own input files (those holding each key, under input_base)
  in place of ImportExampleGen's output shards."""
  holding = tfrecord_check.files_holding(input_base, {key for _, key, _, _ in problems})
  return [(split, key, ", ".join(holding.get(key, [])) or files, problem)
          for split, key, files, problem in problems]


def format_problems(schema_problems: List[str], example_problems: List[Problem],
                    num_bad_examples: int, too_small: Sequence[str] = ()) -> str:
  lines = ["Bad input data; the pipeline stops before Transform and Trainer."]
  lines += [f"  - {problem}" for problem in too_small]
  lines += [f"  - schema anomaly: {problem}" for problem in schema_problems]
  lines += [f"  - split '{split}', example key '{key}' (file {filename}): {problem}"
            for split, key, filename, problem in example_problems]
  if num_bad_examples > len(example_problems):
    lines.append(f"  ... and {num_bad_examples - len(example_problems)} more bad examples or "
                 "keys.")
  return "\n".join(lines)


@component(use_beam=True)
def DataCheck(
    examples: InputArtifact[standard_artifacts.Examples],
    anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
    schema: InputArtifact[standard_artifacts.Schema],
    report: OutputArtifact[simple_artifacts.Metrics],
    input_base: Parameter[str] = "",
    min_train_examples: Parameter[int] = 0,
    min_eval_examples: Parameter[int] = 0,
    beam_pipeline: BeamComponentParameter[beam.Pipeline] = None,
) -> None:
  """Fails with DataValidationError when any split is empty, smaller than its minimum (train,
  eval), or holds an anomaly, an unusable image or a key that is not unique. input_base: the
  user's TFRecord directory, if any."""
  splits = artifact_utils.decode_split_names(examples.split_names)
  empty = empty_splits(examples.uri, splits)
  if empty:
    raise DataValidationError("\n".join(
        ["Bad input data; the pipeline stops before Transform and Trainer."] +
        [f"  - {line}" for line in empty]))
  schema_problems = [line for split in splits for line in schema_anomalies(anomalies.uri, split)]
  curated = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(schema.uri))
  samples_path = os.path.join(report.uri, "bad_examples")
  counts_path = os.path.join(report.uri, "bad_example_count")
  sizes_path = os.path.join(report.uri, "split_sizes")
  with beam_pipeline as pipeline:
    inspected = []
    for split in splits:
      pattern = os.path.join(examples.uri, f"Split-{split}", "*")
      inspected.append(pipeline
                       | f"Files[{split}]" >> beam.Create(sorted(tf.io.gfile.glob(pattern)))
                       | f"Read[{split}]" >> beam.io.ReadAllFromTFRecord(with_filename=True)
                       | f"Inspect[{split}]" >> beam.Map(
                           _inspect, split, anomalous_features(anomalies.uri, split, curated)))
    inspected = inspected | "Flatten" >> beam.Flatten()
    (inspected | "Splits" >> beam.Map(lambda found: found[0])
     | "CountPerSplit" >> beam.combiners.Count.PerElement()
     | "SizesJson" >> beam.Map(json.dumps)
     | "WriteSizes" >> beam.io.WriteToText(sizes_path, shard_name_template=""))
    bad_images = inspected | "BadImages" >> beam.Filter(lambda found: found[3] is not None)
    bad_keys = (inspected
                | "ByKey" >> beam.Map(lambda found: (found[1], (found[0], found[2])))
                | "GroupByKey" >> beam.GroupByKey()
                | "BadKeys" >> beam.MapTuple(key_problem)
                | "DropUnique" >> beam.Filter(lambda problem: problem is not None))
    bad = (bad_images, bad_keys) | "AllProblems" >> beam.Flatten()
    (bad | "First" >> beam.combiners.Top.Smallest(MAX_REPORTED_PROBLEMS)
     | "Json" >> beam.Map(json.dumps)
     | "WriteFirst" >> beam.io.WriteToText(samples_path, shard_name_template=""))
    (bad | "Count" >> beam.combiners.Count.Globally()
     | "WriteCount" >> beam.io.WriteToText(counts_path, shard_name_template=""))
  example_problems = [tuple(p) for p in json.loads(tf.io.gfile.GFile(samples_path).read())]
  if input_base and example_problems:
    example_problems = in_user_files(example_problems, input_base)
  num_bad_examples = int(tf.io.gfile.GFile(counts_path).read())
  sizes = dict(json.loads(line) for line in tf.io.gfile.GFile(sizes_path).read().splitlines())
  too_small = size_problems(sizes, min_train_examples, min_eval_examples)
  summary = {"splits": splits, "split_sizes": sizes, "too_small": too_small,
             "schema_anomalies": schema_problems,
             "bad_examples": example_problems, "num_bad_examples": num_bad_examples}
  with tf.io.gfile.GFile(os.path.join(report.uri, REPORT_FILE), "w") as f:
    json.dump(summary, f, indent=2)
  if schema_problems or num_bad_examples or too_small:
    raise DataValidationError(format_problems(schema_problems, example_problems,
                                              num_bad_examples, too_small))
