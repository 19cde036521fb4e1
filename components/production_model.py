"""The model users are served now, snapshotted as the Evaluator's baseline on every runner: an
open-source KFP server refuses TFX's resolver, and the gate needs "what is served", not "what
was blessed last" (docs/pipeline.md, "What is in production").
"""
import json
import logging
import os
from typing import Any, Dict, List, Optional

from tfx import types
from tfx.dsl.components.base import base_component, base_driver, base_executor, executor_spec
from tfx.dsl.io import fileio
from tfx.orchestration import metadata
from tfx.orchestration.portable import base_driver as ir_base_driver
from tfx.orchestration.portable import data_types as portable_data_types
from tfx.proto.orchestration import driver_output_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ExecutionParameter
from tfx.utils import io_utils, path_utils

from components import pusher, serving_versions

log = logging.getLogger(__name__)

SERVING_DIRECTORY_KEY = "serving_directory"
CANDIDATE_KEY = "candidate"
PRODUCTION_VERSION_KEY = "production_version"  # The version directory; "" for none.
IN_PRODUCTION_KEY = "in_production"  # Custom property of the output: 1 or 0.
MODEL_FINGERPRINT_KEY = "model_fingerprint"
NO_MODEL_FILE = "NO_MODEL_IN_PRODUCTION.json"


def holds_model(model: types.Artifact) -> bool:
  """Whether a Model artifact holds a SavedModel (a snapshot of nothing does not)."""
  model_dir = path_utils.serving_model_path(model.uri)
  return fileio.exists(os.path.join(model_dir, "saved_model.pb"))


SERVING_SIGNATURE = "serving_default"  # What the Evaluator calls (pipeline/evaluation.py).


def signature_inputs(model_dir: str, name: str = SERVING_SIGNATURE) -> Optional[Dict[str, str]]:
  """{input: "dtype shape"} of a SavedModel's signature, read from saved_model.pb without
  loading the model; None when that cannot be read (the Evaluator then reports it)."""
  from tensorflow.core.framework import types_pb2
  from tensorflow.core.protobuf import saved_model_pb2
  saved_model = saved_model_pb2.SavedModel()
  try:
    with fileio.open(os.path.join(model_dir, "saved_model.pb"), "rb") as f:
      saved_model.ParseFromString(f.read())
  except Exception:  # pylint: disable=broad-except  Missing, unreadable or not a SavedModel:
    return None  # each filesystem plugin raises its own types; the Evaluator names the problem.
  signatures = [graph.signature_def[name] for graph in saved_model.meta_graphs
                if name in graph.signature_def]
  if not signatures:
    return None

  def described(tensor) -> str:
    shape = ("unknown rank" if tensor.tensor_shape.unknown_rank else
             str([d.size if d.size >= 0 else None for d in tensor.tensor_shape.dim]))
    return f"{types_pb2.DataType.Name(tensor.dtype)[3:].lower()} {shape}"

  return {key: described(tensor) for key, tensor in sorted(signatures[0].inputs.items())}


def incompatibility(candidate_dir: str, production_dir: str) -> Optional[str]:
  """Why the Evaluator cannot feed the model in production what it feeds the candidate (their
  serving signatures take other inputs), or None (also when either cannot be read)."""
  candidate, production = signature_inputs(candidate_dir), signature_inputs(production_dir)
  if candidate is None or production is None or candidate == production:
    return None
  return (f"its {SERVING_SIGNATURE} signature takes {production}, the candidate's takes "
          f"{candidate}")


class NoCompleteVersion(ValueError):
  """The serving directory holds versions, none complete: what is served cannot be known."""


def production_version_dir(serving_directory: str,
                           candidates: List[types.Artifact]) -> Optional[str]:
  """The newest version under the serving directory that is complete and verified
  (pusher.version_problem) and does not hold the candidate, or None (TF Serving serves the
  newest version it can load; see docs/pipeline.md). Each entry passed over on the way is named
  in a warning; versions of which none is complete raise NoCompleteVersion."""
  if not fileio.exists(serving_directory):
    return None
  problem = pusher.serving_directory_problem(serving_directory)
  if problem:
    raise ValueError(f"The serving directory cannot take the next push: {problem}.")
  versions = serving_versions.versions_by_number(serving_directory)
  for name in serving_versions.entry_names(serving_directory):
    if (serving_versions.parse_version(name) is None
        and not name.startswith(pusher.OWN_HIDDEN_PREFIXES)):
      log.warning("Serving directory: skipping %s: not a version (TF Serving loads only "
                  "entries named by an int64 number).", os.path.join(serving_directory, name))
  for name, served in serving_versions.shadowed_names(serving_directory).items():
    log.warning("Serving directory: skipping %s: TF Serving loads its version from %s.",
                os.path.join(serving_directory, name), os.path.join(serving_directory, served))
  candidate_fingerprint, skipped, any_complete = None, [], False
  for version in reversed(versions):
    version_dir = os.path.join(serving_directory, versions[version])
    problem = pusher.version_problem(version_dir)
    if problem:
      skipped.append(version_dir)
      log.warning("Serving directory: skipping version %s: %s.", version_dir, problem)
      continue
    any_complete = True
    if candidates and candidate_fingerprint is None:
      candidate_fingerprint = pusher.saved_model_fingerprint(
          path_utils.serving_model_path(artifact_utils.get_single_uri(candidates)))
    if pusher.pushed_fingerprint(version_dir) != candidate_fingerprint:
      return version_dir
  if skipped and not any_complete:
    raise NoCompleteVersion(
        f"The serving directory {serving_directory} holds version(s) {', '.join(skipped)} but "
        "none is complete (a SavedModel with the push record it matches), so what is in "
        "production cannot be compared with; the gate will not judge the candidate as a first "
        "blessing. Repair them or move them out of the serving directory, then run again.")
  return None


class ProductionModelSpec(types.ComponentSpec):
  PARAMETERS = {
      SERVING_DIRECTORY_KEY: ExecutionParameter(type=str),
      # Filled in by the driver before the cache check; not set by users.
      PRODUCTION_VERSION_KEY: ExecutionParameter(type=str, optional=True),
  }
  INPUTS = {CANDIDATE_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True)}
  OUTPUTS = {standard_component_specs.MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}


class ProductionModelDriver(base_driver.BaseDriver, ir_base_driver.BaseDriver):
  """Makes the chosen production version part of the cache key (LocalDagRunner runs drivers)."""

  def __init__(self, metadata_handle: metadata.Metadata):
    base_driver.BaseDriver.__init__(self, metadata_handle)
    ir_base_driver.BaseDriver.__init__(self, metadata_handle)

  def run(self, execution_info: portable_data_types.ExecutionInfo
          ) -> driver_output_pb2.DriverOutput:
    version_dir = production_version_dir(
        execution_info.exec_properties[SERVING_DIRECTORY_KEY],
        (execution_info.input_dict or {}).get(CANDIDATE_KEY, []))
    result = driver_output_pb2.DriverOutput()
    result.exec_properties[PRODUCTION_VERSION_KEY].string_value = version_dir or ""
    return result


class ProductionModelExecutor(base_executor.BaseExecutor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]) -> None:
    model = artifact_utils.get_single_instance(output_dict[standard_component_specs.MODEL_KEY])
    serving_directory = exec_properties[SERVING_DIRECTORY_KEY]
    # The driver's choice when it ran (locally); on Kubeflow the executor chooses.
    version_dir = exec_properties.get(PRODUCTION_VERSION_KEY)
    if version_dir is None:
      version_dir = production_version_dir(serving_directory, input_dict.get(CANDIDATE_KEY, []))
    if not version_dir:
      log.info("No model in production under %s to compare with.", serving_directory)
      io_utils.write_string_file(
          os.path.join(model.uri, NO_MODEL_FILE),
          json.dumps({SERVING_DIRECTORY_KEY: serving_directory}, indent=2))
      model.set_int_custom_property(IN_PRODUCTION_KEY, 0)
      return
    io_utils.copy_dir(version_dir, path_utils.serving_model_dir(model.uri))
    model.set_int_custom_property(IN_PRODUCTION_KEY, 1)
    model.set_string_custom_property(PRODUCTION_VERSION_KEY, version_dir)
    model.set_string_custom_property(MODEL_FINGERPRINT_KEY,
                                     pusher.pushed_fingerprint(version_dir) or "")
    log.info("The model in production, %s, is the baseline.", version_dir)


class ProductionModel(base_component.BaseComponent):
  """Outputs `model`: a snapshot of the newest version at `serving_directory` that is not the
  `candidate` (when given), or of nothing."""

  SPEC_CLASS = ProductionModelSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(ProductionModelExecutor)
  DRIVER_CLASS = ProductionModelDriver

  def __init__(self, serving_directory: str, candidate: Optional[types.BaseChannel] = None):
    super().__init__(spec=ProductionModelSpec(
        serving_directory=serving_directory, candidate=candidate,
        model=types.Channel(type=standard_artifacts.Model)))
