"""Nothing new, nothing trained: right after ExampleGen, compares the span (and version) of the
Examples with the data the model in production was trained on (its push record,
components/serving_versions.py) and decides whether this run trains. The training steps run
inside a `tfx.dsl.Cond` on the decision's `train` custom property (pipeline/pipeline.py), which
LocalDagRunner evaluates, and which the compiled spec carries as each task's trigger condition
(kubeflow/local_run.py and the KFP backend evaluate it).

- no model in production, or one pushed without a record of its data: train;
- a newer span (or a newer version of the same span): train;
- the same span and version: skip, "span S already in production as version N" (but for input
  files whose fingerprint, when TFX made one, differs from the one production recorded: train);
- an older span or version: refused (the step fails naming both) unless force_retrain;
- force_retrain: train whatever production holds.
A run that trains nothing writes its entry in the run history (components/run_history.py).
"""
from __future__ import annotations

import dataclasses
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
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter
from tfx.utils import io_utils

from components import production_model, run_history, serving_versions
from storage.object_storage import is_object_store_uri

log = logging.getLogger(__name__)

STEP_ID = "SpanCheck"
EXAMPLES_KEY = "examples"
DECISION_KEY = "decision"
SERVING_DIRECTORY_KEY = "serving_directory"
HISTORY_DIR_KEY = "history_dir"
FORCE_RETRAIN_KEY = "force_retrain"
PRODUCTION_KEY = "production"  # Filled in by the driver: what production held (JSON).
# Custom properties of the decision.
TRAIN_KEY = "train"  # 1: this run trains; 0: it stops after the span check.
REASON_KEY = "reason"
SPAN_KEY = "span"
DATA_VERSION_KEY = "data_version"
PRODUCTION_VERSION_KEY = "production_version"  # The serving version compared with; "" for none.
RUN_ID_KEY = "run_id"
DECISION_FILE = "decision.json"


class SpanDecision(types.Artifact):
  """Whether the run trains, and why (custom properties TRAIN_KEY, REASON_KEY, ...). Its type
  name is a KFP schema title (tfx/orchestration/kubeflow/v2/compiler_utils.py _SCHEMA_TITLE_RE)
  that TFX's Kubeflow entrypoint imports as the class path (kubeflow_v2_entrypoint_utils.py
  _retrieve_class_path): components/__init__.py exposes this class there."""
  TYPE_NAME = "components.SpanDecision"


class RefusedSpan(ValueError):
  """The Examples' span is older than the one production was trained on."""


@dataclasses.dataclass(frozen=True)
class Production:
  """The model in production: its serving version and the data its push record names."""
  version: str  # The version directory's name, e.g. "1764720000".
  version_dir: str
  trained_on: Optional[dict]  # serving_versions.trained_on; None: pushed without a record.

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> Optional["Production"]:
    values = json.loads(text) if text else None
    return cls(**values) if values else None


@dataclasses.dataclass(frozen=True)
class Decision:
  train: bool
  reason: str
  refused: bool = False


def production_state(serving_directory: str) -> Optional[Production]:
  """What TF Serving serves under serving_directory (production_model.production_version_dir)
  and the data it was trained on, or None when nothing is in production."""
  version_dir = production_model.production_version_dir(serving_directory, [])
  if not version_dir:
    return None
  return Production(os.path.basename(version_dir.rstrip("/")), version_dir,
                    serving_versions.recorded_training_data(version_dir))


def _named(span: int, version: int) -> str:
  return f"span {span}" + (f" version {version}" if version else "")


def decide(span: int, version: int, production: Optional[Production],
           force_retrain: bool, input_fingerprint: Optional[str] = None) -> Decision:
  """Whether Examples of `span` and `version` are trained on, given what production holds.
  input_fingerprint: TFX's fingerprint of the input files (an image folder's listing, a
  TFRecord directory's files), when ExampleGen made one: the same span and version read from
  files that changed since production was trained on them is new data."""
  if production is None:
    return Decision(True, f"no model in production: training on {_named(span, version)}")
  if production.trained_on is None:
    return Decision(True, f"production version {production.version} records no training data "
                          f"(pushed before spans were recorded): training on "
                          f"{_named(span, version)}")
  served = (production.trained_on[serving_versions.SPAN_KEY],
            production.trained_on.get(serving_versions.DATA_VERSION_KEY, 0))
  ours = _named(span, version)
  theirs = f"{_named(*served)} of production version {production.version}"
  if (span, version) > served:
    return Decision(True, f"{ours} is newer than {theirs}: training")
  if force_retrain:
    return Decision(True, f"--force_retrain: training on {ours} (production version "
                          f"{production.version} was trained on {_named(*served)})")
  recorded_fingerprint = production.trained_on.get(serving_versions.FINGERPRINT_KEY)
  if ((span, version) == served and input_fingerprint and recorded_fingerprint
      and input_fingerprint != recorded_fingerprint):
    return Decision(True, f"the input files of {ours} changed since production version "
                          f"{production.version} was trained on them (their fingerprint "
                          "differs): training")
  if (span, version) == served:
    return Decision(False, f"{ours} already in production as version {production.version}; "
                           "nothing new to train on (--force_retrain trains anyway)")
  return Decision(False, f"{ours} is older than {theirs}; refused: training on it would "
                         "replace a model of newer data (--force_retrain trains anyway)",
                  refused=True)


class SpanCheckSpec(types.ComponentSpec):
  PARAMETERS = {
      SERVING_DIRECTORY_KEY: ExecutionParameter(type=str),
      HISTORY_DIR_KEY: ExecutionParameter(type=str),
      FORCE_RETRAIN_KEY: ExecutionParameter(type=int),
      # Filled in by the driver before the cache check; not set by users.
      PRODUCTION_KEY: ExecutionParameter(type=str, optional=True),
  }
  INPUTS = {EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples)}
  OUTPUTS = {DECISION_KEY: ChannelParameter(type=SpanDecision)}


class SpanCheckDriver(base_driver.BaseDriver, ir_base_driver.BaseDriver):
  """Puts what production holds now, and the run, into the step's properties (LocalDagRunner
  runs drivers; its cache key covers them): the check is made afresh every run, against the
  serving directory as it is, and every run gets its decision and its history entry. The
  training steps' cache does not depend on it: a Cond's channel is a hidden input of the IR
  (tfx/dsl/compiler/node_inputs_compiler.py), left out of their resolved inputs."""

  def __init__(self, metadata_handle: metadata.Metadata):
    base_driver.BaseDriver.__init__(self, metadata_handle)
    ir_base_driver.BaseDriver.__init__(self, metadata_handle)

  def run(self, execution_info: portable_data_types.ExecutionInfo
          ) -> driver_output_pb2.DriverOutput:
    production = production_state(execution_info.exec_properties[SERVING_DIRECTORY_KEY])
    result = driver_output_pb2.DriverOutput()
    result.exec_properties[PRODUCTION_KEY].string_value = json.dumps({
        "production": json.loads(production.to_json()) if production else None,
        "run_id": execution_info.pipeline_run_id or ""}, sort_keys=True)
    return result


class SpanCheckExecutor(base_executor.BaseExecutor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]) -> None:
    examples = artifact_utils.get_single_instance(input_dict[EXAMPLES_KEY])
    decision_artifact = artifact_utils.get_single_instance(output_dict[DECISION_KEY])
    serving_directory = exec_properties[SERVING_DIRECTORY_KEY]
    driver_state = exec_properties.get(PRODUCTION_KEY)
    run_id = (self._context.pipeline_run_id if self._context else None) or ""
    if driver_state:  # The driver's view when it ran (locally); on Kubeflow the executor looks.
      state = json.loads(driver_state)
      production = Production(**state["production"]) if state["production"] else None
      run_id = run_id or state.get("run_id", "")
    else:
      production = production_state(serving_directory)
    data = serving_versions.examples_data(examples)
    span, version = data[serving_versions.SPAN_KEY], data[serving_versions.DATA_VERSION_KEY]
    decision = decide(span, version, production, bool(exec_properties[FORCE_RETRAIN_KEY]),
                      data.get(serving_versions.FINGERPRINT_KEY))
    decision_artifact.set_int_custom_property(TRAIN_KEY, int(decision.train))
    decision_artifact.set_string_custom_property(REASON_KEY, decision.reason)
    decision_artifact.set_int_custom_property(SPAN_KEY, span)
    decision_artifact.set_int_custom_property(DATA_VERSION_KEY, version)
    decision_artifact.set_string_custom_property(PRODUCTION_VERSION_KEY,
                                                 production.version if production else "")
    decision_artifact.set_string_custom_property(RUN_ID_KEY, run_id)
    if not is_object_store_uri(decision_artifact.uri):
      fileio.makedirs(decision_artifact.uri)
    io_utils.write_string_file(os.path.join(decision_artifact.uri, DECISION_FILE), json.dumps({
        "train": decision.train, "reason": decision.reason, "refused": decision.refused,
        "span": span, "version": version,
        "production": json.loads(production.to_json()) if production else None}, indent=1))
    log.info("Span check: %s", decision.reason)
    if decision.train:
      return
    history_dir = exec_properties[HISTORY_DIR_KEY]
    if history_dir:
      run_history.append(history_dir, run_history.Entry(
          time=run_history.now(), run_id=run_id, span=span, data_version=version,
          outcome=run_history.REFUSED_SPAN if decision.refused else run_history.SKIPPED,
          reason=decision.reason,
          pushed_version=production.version if production and not decision.refused else None))
    if decision.refused:
      raise RefusedSpan(f"SpanCheck: {decision.reason}.")


class SpanCheck(base_component.BaseComponent):
  """Outputs `decision`: whether this run trains on `examples` (custom property `train`: 1 or
  0) and why (`reason`)."""

  SPEC_CLASS = SpanCheckSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(SpanCheckExecutor)
  DRIVER_CLASS = SpanCheckDriver

  def __init__(self, examples: types.BaseChannel, serving_directory: str, history_dir: str,
               force_retrain: bool = False):
    super().__init__(spec=SpanCheckSpec(
        examples=examples, serving_directory=serving_directory, history_dir=history_dir,
        force_retrain=int(force_retrain), decision=types.Channel(type=SpanDecision)))


def read_decision(decision: types.Artifact) -> dict:
  """The decision's custom properties as plain values (numbers as ints, whichever type the
  orchestrator kept them in)."""
  def get(key, default):
    if not decision.has_custom_property(key):
      return default
    # On Kubeflow a custom property comes back as a struct value, which TFX's getter reads as
    # None when it is falsy (tfx/types/artifact.py get_custom_property): 0, or "".
    value = decision.get_custom_property(key)
    return type(default)() if value is None else value
  return {"train": int(get(TRAIN_KEY, 1)) == 1, "reason": str(get(REASON_KEY, "")),
          "span": int(get(SPAN_KEY, 0)), "data_version": int(get(DATA_VERSION_KEY, 0)),
          "production_version": str(get(PRODUCTION_VERSION_KEY, "")),
          "run_id": str(get(RUN_ID_KEY, ""))}
