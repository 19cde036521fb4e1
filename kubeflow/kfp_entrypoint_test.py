"""The compatibility entrypoint on executor inputs shaped as the open-source KFP backend makes
them (kubeflow/pipelines backend/src/v2; the file each shape comes from is named at the test),
not as TFX's own fixtures (which are Vertex-shaped)."""
import json
import os

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as tfx_utils
from tfx.types import standard_artifacts

from kubeflow import kfp_entrypoint

EXAMPLES_SCHEMA = ("title: tfx.Examples\ntype: object\nproperties:\n  span:\n    type: integer\n"
                   "  split_names:\n    type: string\n")
STATISTICS_TYPES = {"input": {"examples": "tfx.Examples"},
                    "output": {"statistics": "tfx.ExampleStatistics"}}


def _executor_input(payload: dict) -> pipeline_spec_pb2.ExecutorInput:
  return json_format.ParseDict(payload, pipeline_spec_pb2.ExecutorInput())


def _statistics_gen_input(examples: dict) -> pipeline_spec_pb2.ExecutorInput:
  """StatisticsGen's input as the MLMD-era driver builds it (driver/container.go,
  driver/resolve.go): the upstream Examples read back from MLMD (metadata/client.go
  GetOutputArtifactsByExecutionId leaves Schema "", OutputArtifact.ToRuntimeArtifact makes it
  the instance schema; converter.go toRuntimeArtifact: name = MLMD id, ints as numbers, structs
  wrapped as stored by StructValueToMLMDValue), and provisioned outputs with the spec's type
  plus the `executor-logs` output of provisionOutputs when logs are published."""
  return _executor_input({
      "inputs": {"artifacts": {"examples": {"artifacts": [examples]}},
                 "parameterValues": {"exclude_splits": "[]"}},
      "outputs": {
          "artifacts": {
              "statistics": {"artifacts": [{
                  "uri": "s3://b/root/p/run/StatisticsGen/salt/statistics",
                  "type": {"instanceSchema": "title: tfx.ExampleStatistics\ntype: object\n"}}]},
              "executor-logs": {"artifacts": [{
                  "uri": "s3://b/root/p/run/StatisticsGen/salt/executor-logs",
                  "type": {"schemaTitle": "system.Artifact"}}]}},
          "outputFile": "/tmp/kfp_outputs/output_metadata.json"}})


def _mlmd_examples(uri="s3://b/root/p/run/ExampleGen/salt/examples", **metadata):
  return {"name": "17", "uri": uri, "type": {"instanceSchema": ""},
          "metadata": {"split_names": '["train", "eval"]', "span": 0.0,
                       "display_name": "examples",
                       "producer_info": {"struct": {"component": "ImageDatasetExampleGen"}},
                       **metadata}}


def test_tfx_alone_cannot_read_what_the_open_source_driver_hands_over():
  executor_input = _statistics_gen_input(_mlmd_examples())
  with pytest.raises(AttributeError):  # yaml.safe_load("") is None: no title to read.
    tfx_utils.parse_raw_artifact_dict(executor_input.inputs.artifacts)
  with pytest.raises(ImportError):  # The executor-logs output: "system.Artifact" is no class.
    tfx_utils.parse_raw_artifact_dict(executor_input.outputs.artifacts)


def test_inputs_get_their_declared_tfx_type_and_keep_their_properties():
  executor_input = _statistics_gen_input(_mlmd_examples())
  kfp_entrypoint.repair_executor_input(executor_input, STATISTICS_TYPES)
  names = {}
  (examples,) = tfx_utils.parse_raw_artifact_dict(executor_input.inputs.artifacts,
                                                  names)["examples"]
  assert isinstance(examples, standard_artifacts.Examples)
  assert examples.split_names == '["train", "eval"]'
  assert examples.span == 0
  assert examples.uri == "s3://b/root/p/run/ExampleGen/salt/examples"
  assert names[examples.id] == "17"  # The MLMD id stays the artifact's name.
  # MLMD's {"struct": ...} wrapper is gone: the custom property is the struct itself.
  assert examples.get_json_value_custom_property("producer_info") == {
      "component": "ImageDatasetExampleGen"}


def test_outputs_keep_only_the_components_own_and_get_their_tfx_type():
  executor_input = _statistics_gen_input(_mlmd_examples())
  kfp_entrypoint.repair_executor_input(executor_input, STATISTICS_TYPES)
  outputs = tfx_utils.parse_raw_artifact_dict(executor_input.outputs.artifacts)
  assert set(outputs) == {"statistics"}  # executor-logs is the launcher's, not TFX's.
  assert isinstance(outputs["statistics"][0], standard_artifacts.ExampleStatistics)


def test_system_titles_of_the_newer_artifact_store_become_the_declared_type():
  """The API-server artifact store types a non-native artifact by its native kind
  (component/importer_launcher.go RuntimeArtifactSchemaAndMetadata, component/util.go
  artifactTypeSchemaToArtifactTypeMap): a TFX Model comes back as system.Artifact or
  system.Model."""
  for title in ("system.Artifact", "system.Model"):
    executor_input = _executor_input({"inputs": {"artifacts": {"model": {"artifacts": [{
        "name": "3", "uri": "s3://b/model", "type": {"schemaTitle": title}}]}}}})
    with pytest.raises(ImportError):
      tfx_utils.parse_raw_artifact_dict(executor_input.inputs.artifacts)
    kfp_entrypoint.repair_executor_input(executor_input, {"input": {"model": "tfx.Model"}})
    (model,) = tfx_utils.parse_raw_artifact_dict(executor_input.inputs.artifacts)["model"]
    assert isinstance(model, standard_artifacts.Model)


def test_missing_split_names_are_recovered_from_the_split_directories(tmp_path):
  for split in ("train", "eval", "test"):
    (tmp_path / f"Split-{split}").mkdir()
  examples = _mlmd_examples(uri=str(tmp_path))
  del examples["metadata"]["split_names"]  # A producer that reported no metadata.
  executor_input = _statistics_gen_input(examples)
  kfp_entrypoint.repair_executor_input(executor_input, STATISTICS_TYPES)
  (parsed,) = tfx_utils.parse_raw_artifact_dict(executor_input.inputs.artifacts)["examples"]
  assert json.loads(parsed.split_names) == ["eval", "test", "train"]


def test_missing_split_names_without_split_directories_name_the_artifact(tmp_path):
  examples = _mlmd_examples(uri=str(tmp_path))
  del examples["metadata"]["split_names"]
  with pytest.raises(ValueError, match=f"'examples' at {tmp_path} has no split_names"):
    kfp_entrypoint.repair_executor_input(_statistics_gen_input(examples), STATISTICS_TYPES)


def test_an_input_the_component_does_not_declare_is_refused():
  executor_input = _statistics_gen_input(_mlmd_examples())
  with pytest.raises(ValueError, match="'examples' is not among the component's inputs"):
    kfp_entrypoint.repair_executor_input(executor_input, {"input": {}, "output": {}})


def test_the_entrypoints_own_flags_are_removed_before_tfx_sees_the_arguments():
  types, run_driver, rest = kfp_entrypoint.split_arguments(
      ["--artifact_types", json.dumps(STATISTICS_TYPES), "--run_example_gen_driver",
       "--executor_class_path", "a.B", "--direct_num_workers=0"])
  assert types == STATISTICS_TYPES and run_driver
  assert rest == ["--executor_class_path", "a.B", "--direct_num_workers=0"]
  with pytest.raises(ValueError, match="--artifact_types JSON is required"):
    kfp_entrypoint.split_arguments(["--executor_class_path", "a.B"])


def _import_example_gen_input(input_base: str, output_file: str):
  """ImportExampleGen's executor input in the OSS backend: parameters as the driver resolves
  them (runtime parameter input_base, constants for the rest), no pre-cache-check ever run."""
  input_config = json.dumps({"splits": [{"name": "train", "pattern": "span-{SPAN}/train/*"},
                                        {"name": "eval", "pattern": "span-{SPAN}/eval/*"}]})
  return _executor_input({
      "inputs": {"parameterValues": {"input_base": input_base, "input_config": input_config,
                                     "output_config": "{}", "output_data_format": 6.0,
                                     "output_file_format": 5.0}},
      "outputs": {"artifacts": {"examples": {"artifacts": [{
          "uri": "s3://b/root/p/run/ImportExampleGen/salt/examples",
          "type": {"instanceSchema": EXAMPLES_SCHEMA}}]}},
                  "outputFile": output_file}})


INPUTS_SPEC = json.dumps({"parameters": {
    name: {"parameterType": kind} for name, kind in (
        ("input_base", "STRING"), ("input_config", "STRING"), ("output_config", "STRING"),
        ("output_data_format", "NUMBER_INTEGER"), ("output_file_format", "NUMBER_INTEGER"))}})


def _write_span(root, span):
  for split in ("train", "eval"):
    directory = root / f"span-{span}" / split
    directory.mkdir(parents=True)
    (directory / "data.tfrecord").write_bytes(b"r" * 10 * span)


def test_the_example_gen_driver_resolves_the_latest_span_and_fingerprints_it(tmp_path):
  data = tmp_path / "data"
  _write_span(data, 1)
  fingerprints = []
  for span in (1, 2):
    if span == 2:
      _write_span(data, 2)  # New data under the same data_root.
    output_file = tmp_path / f"run{span}" / "output_metadata.json"
    executor_input = _import_example_gen_input(str(data), str(output_file))
    kfp_entrypoint.repair_executor_input(
        executor_input, {"input": {}, "output": {"examples": "tfx.Examples"}})
    kfp_entrypoint.run_example_gen_driver(executor_input, INPUTS_SPEC)
    # The Examples the executor will fill carry what the driver found, as on Vertex.
    (examples,) = tfx_utils.parse_raw_artifact_dict(executor_input.outputs.artifacts)[
        "examples"]
    assert examples.get_int_custom_property("span") == span
    fingerprints.append(examples.get_string_custom_property("input_fingerprint"))
    assert "split:train,num_files:1" in fingerprints[-1]
    # What TFX's entrypoint reads from the output file before running the executor.
    with open(output_file) as f:
      driver_output = json.load(f)
    resolved = json.loads(driver_output["parameterValues"]["input_config"])
    assert [s["pattern"] for s in resolved["splits"]] == [f"span-{span}/train/*",
                                                        f"span-{span}/eval/*"]
  assert fingerprints[0] != fingerprints[1]


def test_the_entrypoint_runs_a_tfx_executor_on_an_open_source_shaped_input(tmp_path,
                                                                           monkeypatch):
  """ImportSchemaGen through TFX's own entrypoint, from the command the compiler writes."""
  # main() sets the object-storage variables of its process: keep them to this test.
  monkeypatch.setattr(os, "environ", dict(os.environ))
  schema = tmp_path / "schema.pbtxt"
  schema.write_text('feature { name: "label" type: INT }\n')
  output_file = tmp_path / "kfp_outputs" / "output_metadata.json"
  executor_input = {
      "inputs": {"parameterValues": {"schema_file": str(schema)}},
      "outputs": {"artifacts": {
          "schema": {"artifacts": [{"uri": str(tmp_path / "out" / "schema"),
                                    "type": {"instanceSchema": "title: tfx.Schema\n"}}]},
          "executor-logs": {"artifacts": [{"uri": "s3://b/logs",
                                           "type": {"schemaTitle": "system.Artifact"}}]}},
          "outputFile": str(output_file)}}
  argv = ["--artifact_types", json.dumps({"input": {}, "output": {"schema": "tfx.Schema"}}),
          "--executor_class_path",
          "tfx.components.schema_gen.import_schema_gen.executor.Executor",
          "--json_serialized_invocation_args", json.dumps(executor_input),
          "--json_serialized_inputs_spec_args",
          json.dumps({"parameters": {"schema_file": {"parameterType": "STRING"}}})]
  with pytest.raises(SystemExit) as exit_info:  # absl's app.run exits.
    kfp_entrypoint.main(argv)
  assert exit_info.value.code in (None, 0)
  assert os.path.exists(tmp_path / "out" / "schema" / "schema.pbtxt")
  with open(output_file) as f:
    executor_output = json.load(f)
  assert set(executor_output["artifacts"]) == {"schema"}
  assert executor_output["artifacts"]["schema"]["artifacts"][0]["uri"] == str(
      tmp_path / "out" / "schema")


def test_the_image_folders_driver_resolves_the_requested_day_and_its_window(tmp_path):
  """The image-folder ExampleGen's driver in the entrypoint, from its compiled parameters:
  the runtime parameter `span` arrives as requested_span."""
  from components import example_gen
  from test_support import image_folders
  image_folders.write_dated_spans(str(tmp_path / "photos"), per_class=1)
  component = example_gen.ImageDatasetExampleGen(
      source="image_dir", eval_fraction=0.1, test_fraction=0.1, train_spans=2,
      image_dir=str(tmp_path / "photos" / image_folders.DATE_PATTERN))
  input_config = component.exec_properties["input_config"]  # JSON, as compiled.
  output_file = tmp_path / "run" / "output_metadata.json"
  executor_input = _executor_input({
      "inputs": {"parameterValues": {"input_config": input_config, "output_config": "{}",
                                     "output_data_format": 6.0, "output_file_format": 5.0,
                                     "requested_span": "2026-11-30"}},
      "outputs": {"artifacts": {"examples": {"artifacts": [{
          "uri": "s3://b/root/p/run/ImageDatasetExampleGen/salt/examples",
          "type": {"instanceSchema": EXAMPLES_SCHEMA}}]}},
                  "outputFile": str(output_file)}})
  kfp_entrypoint.repair_executor_input(
      executor_input, {"input": {}, "output": {"examples": "tfx.Examples"}})
  inputs_spec = json.dumps({"parameters": {
      name: {"parameterType": kind} for name, kind in (
          ("input_config", "STRING"), ("output_config", "STRING"),
          ("output_data_format", "NUMBER_INTEGER"), ("output_file_format", "NUMBER_INTEGER"),
          ("requested_span", "STRING"))}})
  kfp_entrypoint.run_example_gen_driver(executor_input, inputs_spec)
  (examples,) = tfx_utils.parse_raw_artifact_dict(executor_input.outputs.artifacts)["examples"]
  assert examples.get_int_custom_property("span") == 20787  # 2026-11-30.
  assert "2026-11-29: image_dir:" in examples.get_string_custom_property("input_fingerprint")
  with open(output_file) as f:
    resolved = json.loads(json.load(f)["parameterValues"]["input_config"])
  query = json.loads(resolved["splits"][0]["pattern"])
  assert [folder for _, _, folder in query["spans"]] == [
      str(tmp_path / "photos" / "2026-11-30"), str(tmp_path / "photos" / "2026-11-29")]
