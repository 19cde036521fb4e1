"""The drift baseline that travels with the model: what the data a model was trained on looked
like, kept inside every version the Pusher publishes, so any runner finds production's baseline
where it finds production's model (components/production_model.py), with no Resolver
(docs/pipeline.md, "Drift").

A baseline directory holds, from the run that trained the model:
  train_statistics.pb   StatisticsGen's statistics of the train split (DatasetFeatureStatisticsList)
  schema.pbtxt          the run's schema
  image_table.npz       the label and image statistics of (a sample of) the train images, one row
                        per image, computed once by the DriftCheck step
  reference_examples.gz serialized tf.Examples of held-out eval images, on which the next runs
                        compute the production model's softmax outputs (BBSD)
  baseline.json         what these were computed from (counts, sample sizes)
"""
import io
import json
import os
from typing import Dict, Optional

import numpy as np
from tfx.types import standard_artifacts
from tfx.dsl.io import fileio

BASELINE_PATH = "assets.extra/drift_baseline"  # In a model's version directory.
OUTPUT_DIR = "baseline"  # In the DriftCheck's output artifact: what the Pusher keeps.
TRAIN_STATISTICS_FILE = "train_statistics.pb"
SCHEMA_FILE = "schema.pbtxt"
IMAGE_TABLE_FILE = "image_table.npz"
REFERENCE_EXAMPLES_FILE = "reference_examples.gz"
INFO_FILE = "baseline.json"
FILES = (TRAIN_STATISTICS_FILE, SCHEMA_FILE, IMAGE_TABLE_FILE, REFERENCE_EXAMPLES_FILE, INFO_FILE)

# Custom properties of the DriftReport artifact (MLMD, the KFP UI), read by the Pusher and the
# run report.
STATUS_KEY = "drift_status"
BLOCKS_PUSH_KEY = "blocks_push"  # 1: --block_on_drift and something moved.
MOVED_KEY = "moved_features"  # JSON list of sentences.
RESULT_FILE = "drift.json"  # Every comparison, in the artifact.
NO_PRODUCTION, NO_BASELINE, NO_DRIFT, DRIFT = (
    "no production model", "production has no baseline", "no drift", "drift")


# The DriftCheck's result (drift.json and custom properties) and the baseline (baseline/) the
# Pusher keeps with the model trained on this data. TFX's own type for a comparison with a
# baseline (DistributionValidator's output): a custom type would reach a Kubeflow spec only as a
# generic artifact (tfx/orchestration/kubeflow/v2/compiler_utils.py, get_artifact_title).
DriftReport = standard_artifacts.ExampleAnomalies


def baseline_dir(model_dir: str) -> str:
  return os.path.join(model_dir, BASELINE_PATH)


def holds_baseline(directory: str) -> bool:
  return all(fileio.exists(os.path.join(directory, name)) for name in FILES)


def copy_baseline(source: str, destination: str) -> None:
  """Copies a baseline directory's files (and nothing else) to `destination`."""
  fileio.makedirs(destination)
  for name in FILES:
    fileio.copy(os.path.join(source, name), os.path.join(destination, name), overwrite=True)


def write_table(path: str, table: Dict[str, np.ndarray]) -> None:
  buffer = io.BytesIO()  # np.savez seeks back and forth; object stores' files do not.
  np.savez_compressed(buffer, **{name: np.asarray(values) for name, values in table.items()})
  with fileio.open(path, "wb") as f:
    f.write(buffer.getvalue())


def read_table(path: str) -> Dict[str, np.ndarray]:
  with fileio.open(path, "rb") as f:
    data = np.load(io.BytesIO(f.read()), allow_pickle=False)
    return {name: data[name] for name in data.files}


def _read_json(directory: str, name: str) -> Optional[dict]:
  """The JSON file `name` in `directory`, or None when there is none."""
  path = os.path.join(directory, name)
  if not fileio.exists(path):
    return None
  with fileio.open(path, "r") as f:
    return json.load(f)


def read_info(directory: str) -> Optional[dict]:
  """A baseline's baseline.json (its counts and sizes), or None for a baseline without one."""
  return _read_json(directory, INFO_FILE)


def read_result(drift_uri: str) -> Optional[dict]:
  """The DriftCheck's drift.json, or None when the artifact holds none."""
  return _read_json(drift_uri, RESULT_FILE)
