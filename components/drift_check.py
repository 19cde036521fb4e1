"""The drift check before the Trainer: the new data against the data the model in production
was trained on (its baseline travels with it, components/drift_baseline.py), feature by feature,
and the production model's softmax outputs on both (BBSD). A class that vanished or appeared
stops the run; a moved distribution is named and, with --block_on_drift, refused by the Pusher
(docs/pipeline.md, "Drift").

TFX 1.16's DistributionValidator compares statistics with a baseline the pipeline resolves, but
open-source KFP refuses the Resolver that would fetch it, and TFDV's statistics see no pixels:
so this step computes the image statistics once per image, hands them to TFDV
(validate_statistics with previous_statistics, a drift comparator per feature), and adds the
two-sample tests TFDV has not.
"""
import hashlib
import json
import logging
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import io_utils, path_utils

from components import drift, drift_baseline
from components.drift_baseline import DriftReport
from trainer_module.features import EXAMPLE_KEY, IMAGE_KEY, LABEL_KEY, PROBABILITIES_KEY

log = logging.getLogger(__name__)

STEP_ID = "DriftCheck"
TRAIN, EVAL = "train", "eval"
_BATCH = 256


class ClassSetChanged(ValueError):
  """The new data lacks a class the production model was trained on, or holds a new one."""


def _split_files(examples_uri: str, split: str) -> List[str]:
  return sorted(tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*")))


def _records(files: List[str]):
  for record in tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator():
    yield record


def _rank(key: bytes, salt: str) -> bytes:
  return hashlib.sha256(salt.encode() + key).digest()


def read_split(examples_uri: str, split: str, sample_size: int
               ) -> Tuple[Dict[str, int], List[bytes]]:
  """(label -> count over the whole split, the serialized examples of a sample of at most
  sample_size of it, chosen by a hash of their keys: the same examples every run)."""
  label_counts: Dict[str, int] = {}
  ranked = []
  for serialized in _records(_split_files(examples_uri, split)):
    example = tf.train.Example.FromString(serialized)
    features = example.features.feature
    label = str(features[LABEL_KEY].int64_list.value[0])
    label_counts[label] = label_counts.get(label, 0) + 1
    key = (features[EXAMPLE_KEY].bytes_list.value[0] if features[EXAMPLE_KEY].bytes_list.value
           else serialized)
    ranked.append((_rank(key, split), serialized))
  ranked.sort(key=lambda pair: pair[0])
  return label_counts, [serialized for _, serialized in ranked[:sample_size]]


def image_table(serialized_examples: List[bytes]) -> Dict[str, np.ndarray]:
  """The label and image statistics of each example: one row per image."""
  rows = []
  for serialized in serialized_examples:
    features = tf.train.Example.FromString(serialized).features.feature
    row = drift.image_statistics(features[IMAGE_KEY].bytes_list.value[0])
    row[drift.LABEL] = int(features[LABEL_KEY].int64_list.value[0])
    rows.append(row)
  names = drift.CATEGORICAL + drift.NUMERIC_IMAGE_STATISTICS
  return {name: np.asarray([row[name] for row in rows]) for name in names}


def softmax_outputs(model_dir: str, *example_sets: List[bytes]) -> List[np.ndarray]:
  """The served model's probabilities for each set of raw serialized tf.Examples
  (serving_default), the model loaded once."""
  serve = tf.saved_model.load(model_dir).signatures["serving_default"]

  def outputs(examples: List[bytes]) -> np.ndarray:
    batches = [serve(examples=tf.constant(examples[i:i + _BATCH]))[PROBABILITIES_KEY].numpy()
               for i in range(0, len(examples), _BATCH)]
    return np.concatenate(batches) if batches else np.zeros((0, 0))

  return [outputs(examples) for examples in example_sets]


def _write_examples(path: str, serialized_examples: List[bytes]) -> None:
  with tf.io.TFRecordWriter(path, options="GZIP") as writer:
    for serialized in serialized_examples:
      writer.write(serialized)


def read_examples(path: str) -> List[bytes]:
  return list(_records([path]))


def write_baseline(directory: str, statistics_uri: str, schema_uri: str,
                   table: Dict[str, np.ndarray], reference: List[bytes], info: dict) -> None:
  """The baseline of this run's data, for the Pusher to keep with the model trained on it."""
  fileio.makedirs(directory)
  fileio.copy(os.path.join(statistics_uri, f"Split-{TRAIN}", "FeatureStats.pb"),
              os.path.join(directory, drift_baseline.TRAIN_STATISTICS_FILE), overwrite=True)
  fileio.copy(io_utils.get_only_uri_in_dir(schema_uri),
              os.path.join(directory, drift_baseline.SCHEMA_FILE), overwrite=True)
  drift_baseline.write_table(os.path.join(directory, drift_baseline.IMAGE_TABLE_FILE), table)
  _write_examples(os.path.join(directory, drift_baseline.REFERENCE_EXAMPLES_FILE), reference)
  io_utils.write_string_file(os.path.join(directory, drift_baseline.INFO_FILE),
                             json.dumps(info, indent=2))


def class_set_message(vanished: List[str], appeared: List[str], version: str) -> str:
  parts = []
  if vanished:
    parts.append(f"class(es) {', '.join(vanished)} of the data the model in production "
                 f"({version}) was trained on are missing from the new train split")
  if appeared:
    parts.append(f"class(es) {', '.join(appeared)} are in the new train split but not in the "
                 "data the model in production was trained on")
  return ("The class set changed; the run stops before training: " + "; ".join(parts) + ".")


def check(examples_uri: str, statistics_uri: str, schema_uri: str, production_dir: Optional[str],
          output_uri: str, limits: drift.Limits, sample_size: int) -> dict:
  """Writes the baseline of the new data under output_uri/baseline and returns the result:
  status, the comparisons, the class-set change. production_dir: the production model's
  SavedModel directory, None when nothing is in production."""
  train_labels, train_sample = read_split(examples_uri, TRAIN, sample_size)
  _, reference = read_split(examples_uri, EVAL, sample_size)
  table = image_table(train_sample)
  write_baseline(os.path.join(output_uri, drift_baseline.OUTPUT_DIR), statistics_uri, schema_uri,
                 table, reference, {"train_examples": sum(train_labels.values()),
                                    "train_label_counts": train_labels,
                                    "image_table_rows": len(train_sample),
                                    "reference_examples": len(reference)})
  result = {"limits": limits.__dict__, "comparisons": [], "vanished_classes": [],
            "appeared_classes": [], "production_version": production_dir or ""}
  if production_dir is None:
    return {**result, "status": drift_baseline.NO_PRODUCTION}
  baseline_dir = drift_baseline.baseline_dir(production_dir)
  if not drift_baseline.holds_baseline(baseline_dir):
    return {**result, "status": drift_baseline.NO_BASELINE}
  info = drift_baseline.read_info(baseline_dir) or {}
  vanished, appeared = drift.class_set_change(info.get("train_label_counts", {}), train_labels)
  result.update(vanished_classes=vanished, appeared_classes=appeared,
                baseline_train_examples=info.get("train_examples"))
  baseline_table = drift_baseline.read_table(
      os.path.join(baseline_dir, drift_baseline.IMAGE_TABLE_FILE))
  baseline_reference = read_examples(
      os.path.join(baseline_dir, drift_baseline.REFERENCE_EXAMPLES_FILE))
  baseline_outputs = new_outputs = None
  if baseline_reference and reference:
    try:
      baseline_outputs, new_outputs = softmax_outputs(production_dir, baseline_reference,
                                                      reference)
    except Exception as error:  # pylint: disable=broad-except  The model's own failure, any
      # type TensorFlow raises: the features are still compared, without BBSD, and it is said.
      baseline_outputs = new_outputs = None
      result["bbsd_not_run"] = f"the model in production did not serve the examples: {error}"
      log.warning("Drift check: no BBSD: %s", result["bbsd_not_run"])
  comparisons = drift.compare(baseline_table, table, limits, baseline_outputs, new_outputs)
  moved = [c for c in comparisons if c.moved]
  result.update(comparisons=[c.to_json() for c in comparisons],
                status=drift_baseline.DRIFT if moved or vanished or appeared
                else drift_baseline.NO_DRIFT)
  return result


def moved_sentences(result: dict) -> List[str]:
  return [drift.Comparison.from_json(c).describe() for c in result["comparisons"] if c["moved"]]


@component
def DriftCheck(  # pylint: disable=invalid-name
    examples: InputArtifact[standard_artifacts.Examples],
    statistics: InputArtifact[standard_artifacts.ExampleStatistics],
    schema: InputArtifact[standard_artifacts.Schema],
    production_model: InputArtifact[standard_artifacts.Model],
    drift_report: OutputArtifact[DriftReport],
    max_category_distance: Parameter[float],
    max_image_divergence: Parameter[float],
    drift_p_value: Parameter[float],
    block_on_drift: Parameter[int],
    sample_size: Parameter[int]) -> None:
  """Compares the new train split (labels, image statistics) and eval split (production's
  softmax outputs) with the baseline kept with the model in production; fails with
  ClassSetChanged when a class vanished or appeared; records moved features on its output and,
  with block_on_drift, marks it so the Pusher refuses the candidate."""
  model_dir = path_utils.serving_model_path(production_model.uri)
  production_dir = (model_dir if fileio.exists(os.path.join(model_dir, "saved_model.pb"))
                    else None)
  limits = drift.Limits(max_category_distance, max_image_divergence, drift_p_value)
  result = check(examples.uri, statistics.uri, schema.uri, production_dir, drift_report.uri,
                 limits, sample_size)
  version = (production_model.get_string_custom_property("production_version")
             if production_model.has_custom_property("production_version") else "")
  result["production_version"] = version or result["production_version"]
  moved = moved_sentences(result)
  blocks = bool(block_on_drift) and bool(moved)
  result.update(moved=moved, blocks_push=blocks)
  io_utils.write_string_file(os.path.join(drift_report.uri, drift_baseline.RESULT_FILE),
                             json.dumps(result, indent=2))
  # The split compared, as ExampleAnomalies records it: on Kubeflow the consumers' entrypoint
  # needs the type's split_names (kubeflow/kfp_entrypoint.py).
  drift_report.split_names = artifact_utils.encode_split_names([TRAIN])
  drift_report.set_string_custom_property(drift_baseline.STATUS_KEY, result["status"])
  drift_report.set_string_custom_property(drift_baseline.MOVED_KEY, json.dumps(moved))
  drift_report.set_int_custom_property(drift_baseline.BLOCKS_PUSH_KEY, int(blocks))
  drift_report.set_string_custom_property("production_version", result["production_version"])
  for comparison in result["comparisons"]:
    name = "bbsd" if comparison["feature"] == drift.BBSD else comparison["feature"]
    if comparison["distance"] is not None:
      drift_report.set_float_custom_property(f"{name}_distance", comparison["distance"])
      drift_report.set_float_custom_property(f"{name}_bound", comparison["bound"])
    drift_report.set_float_custom_property(f"{name}_p_value", comparison["p_value"])
  if result["status"] == drift_baseline.NO_PRODUCTION:
    log.info("Drift check: no model in production, nothing to compare with; passed.")
  elif result["status"] == drift_baseline.NO_BASELINE:
    log.info("Drift check: the model in production (%s) was pushed without a drift baseline; "
             "passed.", result["production_version"])
  for sentence in moved:
    log.warning("Drift: %s%s", sentence, " (--block_on_drift: the Pusher will refuse the "
                "candidate)" if blocks else "")
  if result["vanished_classes"] or result["appeared_classes"]:
    raise ClassSetChanged(class_set_message(result["vanished_classes"],
                                            result["appeared_classes"],
                                            result["production_version"]))
