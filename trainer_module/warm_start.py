"""Warm start: a run begins from the weights of an earlier model of this project (a checkpoint
directory or prefix, or an exported SavedModel), matched by variable name and shape, with
excluded or new variables left fresh. docs/ensembles_and_transfer.md, "Warm start and transfer".
"""
import json
import logging
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras as keras
from tensorflow.core.protobuf import trackable_object_graph_pb2

from trainer_module.export import TRAINING_FILE

log = logging.getLogger(__name__)

# Variables that are running estimates rather than parameters (model.SpectralNormConv2D):
# restored when both sides have them, otherwise fresh or ignored.
_ESTIMATE_SUFFIXES = ("/power_vector",)
# Prefix groups for warm_start_exclude; any other entry is a variable-name prefix.
EXCLUDE_GROUPS = {"head": ("logits",)}
# What the model's assets record about its training (step, config, warm start).
TRAINING_INFO_PATH = os.path.join("assets.extra", TRAINING_FILE)
# Keys of the model and of the state this trainer's checkpoints hold (checkpoints.py).
_CHECKPOINT_MODEL_PREFIX = "model/"
# The optimizer's step counter (under optimizer/inner_optimizer/ with loss scaling).
_CHECKPOINT_STEP_SUFFIX = "_iterations/.ATTRIBUTES/VARIABLE_VALUE"
_CHECKPOINT_CONFIG_KEY = "record/config/.ATTRIBUTES/VARIABLE_VALUE"
_CHECKPOINT_WARM_START_KEY = "record/warm_start/.ATTRIBUTES/VARIABLE_VALUE"
_VALUE = "VARIABLE_VALUE"


class WarmStartError(ValueError):
  """The source cannot initialise this model: unreadable, or variables that do not match."""


class SavedVariable(NamedTuple):
  key: str  # Checkpoint key, to read the value with.
  shape: Tuple[int, ...]
  dtype: str


class Source(NamedTuple):
  path: str  # What the user named.
  kind: str  # "checkpoint" or "saved_model".
  checkpoint: str  # The checkpoint prefix read.


def locate(path: str) -> Source:
  """The checkpoint behind `path`: a SavedModel's variables, a directory's newest checkpoint,
  or the checkpoint prefix itself."""
  if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
    return Source(path, "saved_model", os.path.join(path, "variables", "variables"))
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is None:
      raise WarmStartError(f"warm_start={path}: the directory holds neither a SavedModel "
                           "(saved_model.pb) nor a checkpoint.")
    return Source(path, "checkpoint", latest)
  if tf.io.gfile.exists(path + ".index"):
    return Source(path, "checkpoint", path)
  raise WarmStartError(f"warm_start={path}: no such checkpoint or SavedModel.")


# The trainer fields that shape every layer: a source recorded with others cannot match.
ARCHITECTURE_FIELDS = ("depth", "width_multiplier")


def check_source(path: str, config: Optional[dict] = None) -> None:
  """Raises WarmStartError unless `path` is a source this trainer can warm-start from, read as
  warm_start reads it, and (given this run's trainer config as a dict) recorded with the same
  architecture: for the flag checks made before any work."""
  source = locate(path)
  model_variables(source)
  recorded = training_info(source).get("trainer_config") or {}
  differ = [f"{name}={recorded[name]} there, {config[name]} here" for name in ARCHITECTURE_FIELDS
            if config and name in recorded and recorded[name] != config[name]]
  if differ:
    raise WarmStartError(f"warm_start={path}: the source is a model of another architecture "
                         f"({'; '.join(differ)}): no warm_start_exclude makes its variables "
                         "match; warm-start from a model of this depth and width.")


def model_variables(source: Source) -> Dict[str, SavedVariable]:
  """{Keras variable name: saved variable} of the model in the source's checkpoint."""
  try:
    reader = tf.train.load_checkpoint(source.checkpoint)
    graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
        reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  except (tf.errors.OpError, ValueError) as error:
    raise WarmStartError(f"warm_start={source.path}: cannot read {source.checkpoint}: "
                         f"{str(error).splitlines()[0]}") from None
  shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
  variables = {}
  for node in graph.nodes:
    for attribute in node.attributes:
      key = attribute.checkpoint_key
      if attribute.name == _VALUE and _is_model_key(source.kind, key):
        variables[attribute.full_name] = SavedVariable(key, tuple(shapes[key]),
                                                       dtypes[key].name)
  if not variables:
    raise WarmStartError(f"warm_start={source.path}: {source.checkpoint} holds no model "
                         "variables of this project's trainer.")
  return variables


def _is_model_key(kind: str, key: str) -> bool:
  """The model's own variables: under `model/` in a training checkpoint; at a SavedModel's
  root, the Keras layers' (not the Transform layer's)."""
  if kind == "checkpoint":
    return key.startswith(_CHECKPOINT_MODEL_PREFIX)
  return key.startswith("layer")


def variable_name(variable: tf.Variable) -> str:
  """The Keras layer/variable path, as checkpoints record it ("logits/kernel")."""
  return variable.name.split(":")[0]


def excluded(name: str, exclude: Sequence[str]) -> bool:
  prefixes = [p for entry in exclude for p in EXCLUDE_GROUPS.get(entry, (entry,))]
  return any(name == p or name.startswith((p + "/", p + "_")) for p in prefixes)


def plan(model_vars: Sequence[tf.Variable], saved: Dict[str, SavedVariable],
         exclude: Sequence[str]) -> Tuple[List[Tuple[tf.Variable, SavedVariable]], List[str],
                                          List[str]]:
  """(variables to restore with their saved values, excluded names, mismatch descriptions)."""
  restore, skipped, mismatches = [], [], []
  names = set()
  for variable in model_vars:
    name = variable_name(variable)
    names.add(name)
    shape = tuple(variable.shape.as_list())
    if excluded(name, exclude) or (name.endswith(_ESTIMATE_SUFFIXES) and name not in saved):
      skipped.append(name)
    elif name not in saved:
      mismatches.append(f"{name} {list(shape)}: not in the source")
    elif saved[name].shape != shape:
      mismatches.append(f"{name}: shape {list(shape)} here, {list(saved[name].shape)} in the "
                        "source")
    else:
      restore.append((variable, saved[name]))
  for name, value in sorted(saved.items()):
    if name not in names and not excluded(name, exclude) and not name.endswith(
        _ESTIMATE_SUFFIXES):
      mismatches.append(f"{name} {list(value.shape)}: in the source, not in this model")
  return restore, skipped, mismatches


def warm_start(model: keras.Model, path: str, exclude: Sequence[str],
               origin: Optional[str] = None) -> dict:
  """Restores `model`'s matching variables from `path`; returns what was done, for the record.
  origin: where the source came from, when `path` is a copy (the production version)."""
  source = locate(path)
  saved = model_variables(source)
  restore, skipped, mismatches = plan(model.variables, saved, exclude)
  if mismatches:
    raise WarmStartError(
        f"warm_start={path}: {len(mismatches)} variable(s) do not match and are not excluded "
        "(warm_start_exclude=head re-initialises the classifier for a new label set):\n  "
        + "\n  ".join(mismatches))
  reader = tf.train.load_checkpoint(source.checkpoint)
  for variable, value in restore:
    variable.assign(reader.get_tensor(value.key))
  info = training_info(source)
  record = {"source": origin or path, "kind": source.kind, "checkpoint": source.checkpoint,
            "source_step": info.get("step"), "restored_variables": len(restore),
            "excluded_variables": skipped}
  log.info("Warm-started from %s (%s%s): restored %d of %d model variables by name; "
           "freshly initialised (excluded): %s; optimizer state starts fresh.",
           record["source"], source.kind,
           f" at step {record['source_step']}" if record["source_step"] is not None else "",
           len(restore), len(model.variables), ", ".join(skipped) or "none")
  return record


def was_restored(variable: tf.Variable, record: Optional[dict]) -> bool:
  """Whether the warm start that wrote `record` restored `variable` (not excluded: left
  freshly initialised). Read from the run's record, which checkpoints keep, so a resumed run
  gets the same answer."""
  return bool(record) and variable_name(variable) not in record["excluded_variables"]


def training_info(source: Source) -> dict:
  """The step, trainer config and warm start a source was written with (what is known)."""
  if source.kind == "saved_model":
    path = os.path.join(source.path, TRAINING_INFO_PATH)
    if not tf.io.gfile.exists(path):
      return {}
    with tf.io.gfile.GFile(path) as f:
      return json.load(f)
  reader = tf.train.load_checkpoint(source.checkpoint)
  info = {}
  steps = [key for key in reader.get_variable_to_shape_map()
           if key.startswith("optimizer/") and key.endswith(_CHECKPOINT_STEP_SUFFIX)]
  if steps:
    info["step"] = int(reader.get_tensor(min(steps, key=len)))
  for name, key in (("trainer_config", _CHECKPOINT_CONFIG_KEY),
                    ("warm_start", _CHECKPOINT_WARM_START_KEY)):
    if reader.has_tensor(key):
      text = reader.get_tensor(key).decode()
      info[name] = json.loads(text) if text else None
  return info


def inspect(path: str) -> str:
  """A readable listing of a source: its model variables, step, config and warm start."""
  source = locate(path)
  saved = model_variables(source)
  info = training_info(source)
  lines = [f"{source.kind}: {source.checkpoint}",
           f"step: {info.get('step', 'unknown')}",
           f"warm-started from: {json.dumps(info.get('warm_start'))}",
           "trainer config: " + (json.dumps(info["trainer_config"], sort_keys=True)
                                 if info.get("trainer_config") else "not recorded"),
           f"model variables: {len(saved)} "
           f"({sum(int(np.prod(v.shape)) for v in saved.values())} values)"]
  width = max(len(name) for name in saved)
  lines += [f"  {name:<{width}}  {str(list(v.shape)):<20} {v.dtype}"
            for name, v in sorted(saved.items())]
  return "\n".join(lines)
