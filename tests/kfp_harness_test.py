"""The compiled kfp spec, executed as an open-source KFP v2 backend would (testing/kfp_harness.py),
twice on s3:// of a local S3 server: a first model is blessed and pushed; the next run's
Evaluator compares its (degraded) candidate with that pushed model and refuses it: nothing is
pushed."""
import json

import pytest
import yaml

from kubeflow import submit
from testing import kfp_harness
from testing.tiny_config import SMALL_MODEL

PIPELINE_NAME = "wrn-kfp-harness-test"  # Its own serving directory on the session's S3 server.
UPSTREAM_OF_TRAINER = ("ImageDatasetExampleGen", "StatisticsGen", "ImportSchemaGen",
                       "ExampleValidator", "ValidationGate", "Transform")


def _trainer_config(spec, *trainer_flags):
  """The `trainer_config` runtime parameter as `python -m kubeflow run --FLAG=...` sets it."""
  return submit.run_parameters(spec, list(trainer_flags), None)


def _executor_input_artifact(task, name):
  (artifact,) = task.executor_input["inputs"]["artifacts"][name]["artifacts"]
  return artifact


def test_the_harness_refuses_what_the_backend_refuses(tmp_path):
  """argocompiler/dag.go: a resolver (or customJob) executor fails the pipeline up front."""
  spec = {"pipelineInfo": {"name": "p"}, "defaultPipelineRoot": "s3://b/root",
          "deploymentSpec": {"executors": {
              "Trainer_executor": {"container": {"image": "i", "command": ["python"]}},
              "latest_blessed_model_resolver_executor": {"resolver": {}}}},
          "components": {}, "root": {"dag": {"tasks": {}}}}
  path = tmp_path / "spec.yaml"
  path.write_text(yaml.safe_dump(spec))
  with pytest.raises(kfp_harness.RefusedPipeline,
                     match="latest_blessed_model_resolver_executor: resolver executors not "
                           "implemented"):
    kfp_harness.Harness(str(path), str(tmp_path / "work"))


def test_the_harness_hands_the_executor_input_over_as_the_launcher_marshals_it():
  """launcher_v2.go: {{$}} is protojson.Marshal's output: no empty maps, integral numbers
  without a fraction (what kfp.local's executor_input_to_dict writes too)."""
  executor_input = {
      "inputs": {"parameterValues": {"output_data_format": 6.0, "ratio": 0.5}, "artifacts": {}},
      "outputs": {"artifacts": {}, "parameters": {}, "outputFile": "/tmp/out.json"}}
  text = kfp_harness.placeholders(executor_input)["{{$}}"]
  assert json.loads(text) == {"inputs": {"parameterValues": {"output_data_format": 6,
                                                             "ratio": 0.5}},
                              "outputs": {"outputFile": "/tmp/out.json"}}
  assert '"output_data_format":6,' in text


def test_the_harness_names_each_output_artifact_after_its_key(tmp_path):
  """driver.go provisionOutputs (KFP 2.15 on), as kfp.local does."""
  spec = {"pipelineInfo": {"name": "p"}, "defaultPipelineRoot": "s3://b/root",
          "deploymentSpec": {"executors": {}}, "components": {}, "root": {"dag": {"tasks": {}}}}
  path = tmp_path / "spec.yaml"
  path.write_text(yaml.safe_dump(spec))
  harness = kfp_harness.Harness(str(path), str(tmp_path / "work"), publish_logs=False)
  component = {"outputDefinitions": {"artifacts": {"model": {
      "artifactType": {"instanceSchema": "title: tfx.Model\ntype: object\n"}}}}}
  outputs = harness._provision_outputs("s3://b/root/p/run", "Trainer", component,
                                       str(tmp_path / "task"))
  (model,) = outputs["artifacts"]["model"]["artifacts"]
  assert model["name"] == "model"
  assert model["uri"].startswith("s3://b/root/p/run/Trainer/") and model["uri"].endswith("/model")


@pytest.mark.e2e
def test_the_compiled_spec_runs_on_s3_compares_with_production_and_refuses_a_degraded_model(
    tmp_path, s3_server):
  config, compiled = kfp_harness.compile_for_s3(s3_server, str(tmp_path / "package"),
                                                SMALL_MODEL, PIPELINE_NAME)
  with open(compiled.spec_path) as f:
    spec = yaml.safe_load(f)
  harness = kfp_harness.Harness(compiled.spec_path, str(tmp_path / "harness"),
                                env=s3_server.environ())
  metadata = harness.metadata

  # Run 1: nothing in production; the candidate passes the absolute bounds and is pushed.
  assert kfp_harness.pushed_versions(s3_server, config.serving_model_dir) == []
  first = harness.run()
  assert first.run_root.startswith(f"{config.pipeline_root}/{PIPELINE_NAME}/")
  versions = kfp_harness.pushed_versions(s3_server, config.serving_model_dir)
  assert len(versions) == 1
  first_version = f"{config.serving_model_dir}/{versions[0]}"
  blessing = metadata.artifact(first.tasks["Evaluator"].outputs["blessing"])
  assert blessing["custom_properties"]["blessed"] == {"double_value": 1.0}
  baseline = metadata.artifact(first.tasks["ProductionModel"].outputs["model"])
  assert baseline["custom_properties"]["in_production"] == {"double_value": 0.0}
  # Every artifact lives under the run's root on s3://, as the driver names them.
  for task in first.tasks.values():
    for artifact_id in task.outputs.values():
      assert metadata.artifact(artifact_id)["uri"].startswith(f"{first.run_root}/{task.name}/")

  # Run 2: a degraded candidate (two training steps). Upstream of the Trainer comes from KFP's
  # cache; the baseline is read afresh: the model run 1 pushed. The gate compares the two,
  # refuses the candidate, and nothing is pushed.
  second = harness.run(_trainer_config(spec, "--train_steps=2"))
  assert all(second.tasks[name].cached for name in UPSTREAM_OF_TRAINER)
  assert not second.tasks["Trainer"].cached and not second.tasks["ProductionModel"].cached
  production = second.tasks["ProductionModel"].outputs["model"]
  assert metadata.artifact(production)["custom_properties"]["production_version"] == {
      "string_value": first_version}
  evaluator = second.tasks["Evaluator"]
  given_baseline = _executor_input_artifact(evaluator, "baseline_model")
  assert given_baseline["name"] == str(production)
  assert given_baseline["metadata"]["production_version"] == first_version
  assert given_baseline["type"] == {"instanceSchema": ""}  # As the OSS driver hands it over.
  blessing = metadata.artifact(evaluator.outputs["blessing"])["custom_properties"]
  # TFX records on the blessing the baseline its change thresholds were checked against.
  assert blessing["baseline_model"] == {"string_value": given_baseline["uri"]}
  assert blessing["baseline_model_id"] == {"string_value": str(production)}
  assert blessing["blessed"] == {"double_value": 0.0}
  pushed = metadata.artifact(second.tasks["Pusher"].outputs["pushed_model"])
  assert pushed["custom_properties"]["pushed"] == {"double_value": 0.0}
  assert kfp_harness.pushed_versions(s3_server, config.serving_model_dir) == versions
  print(json.dumps({f"run {i + 1} s": round(run.seconds) for i, run in
                    enumerate((first, second))}))
