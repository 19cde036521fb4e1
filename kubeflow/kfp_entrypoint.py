"""The command of every container compiled for an open-source KFP v2 server: repairs what that
backend passes TFX (artifact types, metadata, ExampleGen's driver, s3:// setup), then runs TFX's
Kubeflow V2 entrypoint as Vertex would (docs/kubeflow.md, "Open-source KFP or Vertex AI").
"""
import json
import os
import sys
from typing import Dict, List, Sequence, Tuple

from absl import app
from absl import logging
from google.protobuf import json_format
from google.protobuf import struct_pb2
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.dsl.io import fileio
from tfx.orchestration.kubeflow.v2 import compiler_utils
from tfx.components.example_gen import driver as example_gen_driver
from tfx.components.example_gen import utils as example_gen_utils
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import import_utils
from tfx.utils import proto_utils

from components import example_gen
from storage import object_storage

COMMAND = ("python", "-m", "kubeflow.kfp_entrypoint")
ARTIFACT_TYPES_FLAG = "--artifact_types"  # JSON: {"input": {name: title}, "output": {...}}.
EXAMPLE_GEN_DRIVER_FLAG = "--run_example_gen_driver"
INVOCATION_FLAG = "--json_serialized_invocation_args"
INPUTS_SPEC_FLAG = "--json_serialized_inputs_spec_args"
SPLIT_NAMES = "split_names"
SPLIT_DIR_PREFIX = "Split-"
MLMD_WRAPPERS = ("list", "struct")  # The one key StructValueToMLMDValue wraps values in.
# The run report's artifact classes, by the schema titles the KFP UI renders. TFX's entrypoint
# imports a custom type's title as a class path (kubeflow_v2_entrypoint_utils.py,
# _retrieve_class_path); "system.HTML" is none, so it is looked up here, as TFX looks up its own.
REPORT_TYPE_CLASSES = {"system.HTML": "reporting.run_report.HtmlReport",
                       "system.Markdown": "reporting.run_report.MarkdownReport"}
compiler_utils.TITLE_TO_CLASS_PATH.update(REPORT_TYPE_CLASSES)


def split_arguments(argv: Sequence[str]) -> Tuple[Dict[str, Dict[str, str]], bool, List[str]]:
  """This entrypoint's own flags, and TFX's argument list without them."""
  argv = list(argv)
  if ARTIFACT_TYPES_FLAG not in argv[:-1]:
    raise ValueError(f"{ARTIFACT_TYPES_FLAG} JSON is required: the compiler writes each "
                     "component's artifact types there.")
  at = argv.index(ARTIFACT_TYPES_FLAG)
  types = json.loads(argv[at + 1])
  del argv[at:at + 2]
  run_driver = EXAMPLE_GEN_DRIVER_FLAG in argv
  if run_driver:
    argv.remove(EXAMPLE_GEN_DRIVER_FLAG)
  return types, run_driver, argv


def _flag_value(argv: Sequence[str], flag: str) -> str:
  if flag not in argv[:-1]:
    raise ValueError(f"{flag} is missing from the command's arguments.")
  return argv[argv.index(flag) + 1]


def _artifact_class(title: str):
  return import_utils.import_class_by_path(compiler_utils.TITLE_TO_CLASS_PATH.get(title, title))


def _unwrap(value: struct_pb2.Value) -> None:
  """{"list": [...]} / {"struct": {...}} as MLMD stored them, back to the value itself."""
  # The OSS backend wraps them so (kubeflow/pipelines backend/src/v2/metadata/converter.go,
  # StructValueToMLMDValue).
  fields = value.struct_value.fields if value.HasField("struct_value") else {}
  if len(fields) == 1:
    (key, inner), = fields.items()
    if key in MLMD_WRAPPERS:
      value.CopyFrom(inner)


def _split_names_from_uri(name: str, uri: str) -> str:
  """An Examples-like artifact's splits, as its producer laid them out: <uri>/Split-<name>."""
  entries = fileio.listdir(uri) if fileio.isdir(uri) else []
  splits = sorted(entry.rstrip("/")[len(SPLIT_DIR_PREFIX):] for entry in entries
                  if entry.startswith(SPLIT_DIR_PREFIX))
  if not splits:
    raise ValueError(f"Input artifact {name!r} at {uri} has no {SPLIT_NAMES} and no "
                     f"{SPLIT_DIR_PREFIX}* directory to recover them from.")
  return artifact_utils.encode_split_names(splits)


def _repair_artifact(name: str, artifact: pipeline_spec_pb2.RuntimeArtifact, title: str,
                     is_input: bool) -> None:
  artifact.type.Clear()
  artifact.type.schema_title = title
  for value in artifact.metadata.fields.values():
    _unwrap(value)
  properties = _artifact_class(title).PROPERTIES or {}
  # An artifact whose producer reported no metadata comes back without type-specific properties.
  if (is_input and SPLIT_NAMES in properties and SPLIT_NAMES not in artifact.metadata.fields
      and SPLIT_NAMES not in artifact.properties):
    artifact.metadata.fields[SPLIT_NAMES].string_value = _split_names_from_uri(name,
                                                                               artifact.uri)


def repair_executor_input(executor_input: pipeline_spec_pb2.ExecutorInput,
                          types: Dict[str, Dict[str, str]]) -> None:
  """Gives every artifact the TFX type its component declares, in place; outputs that the
  component does not declare (the driver's executor-logs) are left to the launcher."""
  declared_inputs, declared_outputs = types.get("input", {}), types.get("output", {})
  for name, artifacts in executor_input.inputs.artifacts.items():
    if name not in declared_inputs:
      raise ValueError(f"Input artifact {name!r} is not among the component's inputs "
                       f"{sorted(declared_inputs)}.")
    for artifact in artifacts.artifacts:
      _repair_artifact(name, artifact, declared_inputs[name], is_input=True)
  outputs = executor_input.outputs.artifacts
  for name in [name for name in outputs if name not in declared_outputs]:
    logging.info("Output %r is not the component's own; the launcher handles it.", name)
    del outputs[name]
  for name, artifacts in outputs.items():
    for artifact in artifacts.artifacts:
      _repair_artifact(name, artifact, declared_outputs[name], is_input=False)


def run_example_gen_driver(executor_input: pipeline_spec_pb2.ExecutorInput,
                           inputs_spec_json: str) -> None:
  """The ExampleGen's driver before its executor, as TFX's Kubeflow V2 driver runs TFX's own
  (tfx/orchestration/kubeflow/v2/file_based_example_gen/driver.py, _run_driver), with this
  project's driver classes (components/example_gen.py: TFX's file-based driver with the run's
  `span`, or the image folder's): it resolves the span and version, fingerprints the input and
  writes the updated exec properties to the executor output file, where TFX's entrypoint reads
  them. The Examples properties (span, version, input_fingerprint) go into the output artifact
  here, as Vertex would have recorded them before the executor ran."""
  inputs_spec = pipeline_spec_pb2.ComponentInputsSpec()
  json_format.Parse(inputs_spec_json, inputs_spec, ignore_unknown_fields=True)
  exec_properties = kubeflow_v2_entrypoint_utils.parse_execution_properties(
      executor_input.inputs.parameter_values, executor_input.inputs.parameters, inputs_spec)
  name_from_id = {}
  outputs = kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(
      executor_input.outputs.artifacts, name_from_id)
  key = standard_component_specs.EXAMPLES_KEY
  if key not in outputs:
    raise ValueError("Example artifact was missing in the ExampleGen outputs.")
  driver = example_gen.driver_for(exec_properties)(None)
  resolved = driver.resolve_exec_properties(dict(exec_properties), None, None)
  examples = artifact_utils.get_single_instance(outputs[key])
  example_gen_driver.update_output_artifact(resolved, examples.mlmd_artifact)

  driver_output = pipeline_spec_pb2.ExecutorOutput()
  values = driver_output.parameter_values
  values[example_gen_utils.SPAN_PROPERTY_NAME].number_value = resolved[
      example_gen_utils.SPAN_PROPERTY_NAME]
  for name in (example_gen_utils.FINGERPRINT_PROPERTY_NAME,):
    if resolved.get(name) is not None:
      values[name].string_value = resolved[name]
  if resolved.get(example_gen_utils.VERSION_PROPERTY_NAME) is not None:
    values[example_gen_utils.VERSION_PROPERTY_NAME].number_value = resolved[
        example_gen_utils.VERSION_PROPERTY_NAME]
  input_config = resolved[standard_component_specs.INPUT_CONFIG_KEY]
  values[standard_component_specs.INPUT_CONFIG_KEY].string_value = (
      input_config if isinstance(input_config, str) else proto_utils.proto_to_json(input_config))
  runtime_examples = kubeflow_v2_entrypoint_utils.to_runtime_artifact(examples, name_from_id)
  driver_output.artifacts[key].artifacts.add().CopyFrom(runtime_examples)
  output_file = executor_input.outputs.output_file
  fileio.makedirs(os.path.dirname(output_file))
  with fileio.open(output_file, "w") as f:
    f.write(json_format.MessageToJson(driver_output, sort_keys=True))
  executor_input.outputs.artifacts[key].artifacts[0].metadata.update(
      json_format.MessageToDict(runtime_examples.metadata))


def main(argv: Sequence[str]) -> None:
  object_storage.configure()
  types, run_driver, tfx_argv = split_arguments(argv)
  executor_input = pipeline_spec_pb2.ExecutorInput()
  json_format.Parse(_flag_value(tfx_argv, INVOCATION_FLAG), executor_input,
                    ignore_unknown_fields=True)
  repair_executor_input(executor_input, types)
  if run_driver:
    run_example_gen_driver(executor_input, _flag_value(tfx_argv, INPUTS_SPEC_FLAG))
  tfx_argv[tfx_argv.index(INVOCATION_FLAG) + 1] = json_format.MessageToJson(executor_input)
  # TFX passes the arguments it does not know to Beam: the S3 endpoint of this pod goes there.
  tfx_argv = object_storage.with_beam_s3_options(tfx_argv)
  app.run(kubeflow_v2_run_executor.main, argv=[sys.argv[0]] + tfx_argv,
          flags_parser=kubeflow_v2_run_executor._parse_flags)  # pylint: disable=protected-access


if __name__ == "__main__":
  object_storage.exit_after(lambda: main(sys.argv[1:]))
