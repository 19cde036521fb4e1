"""The Trainer step's launcher executor: the TrainJob it builds from the step's artifacts, and
its run against a Kubernetes API (test_support/kube_api.py) reached through a kubeconfig."""
import json
import os
import threading
import time

import pytest
from tfx.types import standard_artifacts
from tfx.utils import json_utils

from kubeflow import trainjob
from kubeflow.compiler import pipeline_job
from kubeflow.cluster_config import from_flags
from kubeflow.trainjob_launcher import TrainJobExecutor, build_manifest, trainjob_settings
from kubeflow.trainjob_node import NodeExecutor
from test_support.kube_api import KubeApi, write_kubeconfig

PLACEMENT = trainjob.NodePlacement(resources={"limits": {"nvidia.com/gpu": "1"}},
                                   env=({"name": "AWS_REGION", "value": "us-east-1"},))


def step(root, custom_config=None):
  examples = standard_artifacts.Examples()
  examples.uri = "s3://bucket/root/p/run-1/Transform/9/transformed_examples"
  model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
  model.uri = os.path.join(root, "Trainer", "7", "model")
  model_run.uri = os.path.join(root, "Trainer", "7", "model_run")
  config = {"trainer": {"train_epochs": 3}, **trainjob_settings(3, "registry/wrn:2", PLACEMENT)}
  exec_properties = {"run_fn": "trainer_module.tfx_trainer.run_fn",
                     "custom_config": json_utils.dumps(custom_config or config)}
  return {"examples": [examples]}, {"model": [model], "model_run": [model_run]}, exec_properties


def test_the_nodes_run_the_trainer_executor_on_the_steps_own_artifacts(tmp_path):
  inputs, outputs, exec_properties = step(str(tmp_path))
  manifest = build_manifest(inputs, outputs, exec_properties, "team-a")
  trainer = manifest["spec"]["trainer"]
  assert trainer["numNodes"] == 3 and trainer["image"] == "registry/wrn:2"
  assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": "1"}}
  assert {"name": "AWS_REGION", "value": "us-east-1"} in trainer["env"]
  command = trainer["command"]
  assert command[:3] == ["python", "-m", "kubeflow.trainjob_node"]
  assert command[command.index("--executor_class_path") + 1] == (
      "kubeflow.trainjob_node.NodeExecutor")
  assert json.loads(command[command.index("--exec-properties") + 1]) == exec_properties
  node_outputs = json.loads(command[command.index("--outputs") + 1])
  assert node_outputs["model"][0]["artifact"]["uri"] == outputs["model"][0].uri
  assert issubclass(NodeExecutor, __import__(
      "tfx.components.trainer.executor", fromlist=["GenericExecutor"]).GenericExecutor)


def test_the_name_is_the_same_for_a_retried_launcher_and_differs_by_step_execution(tmp_path):
  names = {build_manifest(*step(str(tmp_path / "a")), "ns")["metadata"]["name"]
           for _ in range(2)}
  assert len(names) == 1
  assert build_manifest(*step(str(tmp_path / "b")), "ns")["metadata"]["name"] not in names


def test_a_custom_config_without_the_trainjob_settings_is_a_clear_error(tmp_path):
  with pytest.raises(ValueError, match="custom_config has no 'kubeflow_trainjob'"):
    build_manifest(*step(str(tmp_path), {"trainer": {}}), "ns")


@pytest.mark.parametrize("chief_exports", [True, False])
def test_the_executor_runs_the_trainjob_and_wants_the_chiefs_model(tmp_path, monkeypatch,
                                                                   chief_exports):
  inputs, outputs, exec_properties = step(str(tmp_path))
  with KubeApi() as api:
    kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), api.url, "team-b")
    monkeypatch.setenv("KUBECONFIG", kubeconfig)

    def controller():  # The nodes train; the chief exports; the TrainJob completes.
      while not api.objects:
        time.sleep(0.02)
      [(_, namespace, name)] = api.objects
      if chief_exports:
        os.makedirs(os.path.join(outputs["model"][0].uri, "Format-Serving"))
      api.set_status(trainjob.PLURAL, namespace, name, {"conditions": [
          {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "",
           "lastTransitionTime": "2026-11-26T09:00:00Z"}]})
    threading.Thread(target=controller, daemon=True).start()
    executor = TrainJobExecutor(TrainJobExecutor.Context(tmp_dir=str(tmp_path / "tmp"),
                                                         unique_id="1"))
    if chief_exports:
      executor.Do(inputs, outputs, exec_properties)
    else:
      with pytest.raises(RuntimeError, match="its chief node exported no model"):
        executor.Do(inputs, outputs, exec_properties)
    [(_, namespace, _)] = api.objects
    assert namespace == "team-b"  # The kubeconfig context's (in a pod: its own namespace).


def test_the_compiled_kfp_spec_with_two_replicas_runs_the_launcher_in_the_trainer_step():
  config = from_flags(["--image=registry/wrn:5", "--output_dir=s3://bucket/wrn",
                       "--replica_count=2", "--distribution_strategy=multi_worker_mirrored"])
  spec = pipeline_job(config)["pipelineSpec"]
  trainer = spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
  args = trainer["args"]
  assert args[args.index("--executor_class_path") + 1] == (
      "kubeflow.trainjob_launcher.TrainJobExecutor")
  assert trainer["image"] == "registry/wrn:5"
  custom_config = json.loads(
      spec["root"]["inputDefinitions"]["parameters"]["trainer_config"]["defaultValue"])
  # Each node gets the Trainer's pod: its resources and the S3 Secret's keys in its env.
  assert custom_config["kubeflow_trainjob"] == {
      "num_nodes": 2, "image": "registry/wrn:5", "placement": trainjob.NodePlacement(
          resources={"requests": {"cpu": "8", "memory": "32Gi"},
                     "limits": {"cpu": "8", "memory": "32Gi"}},
          env=tuple({"name": variable, "valueFrom": {"secretKeyRef": {
              "name": "mlpipeline-minio-artifact", "key": key}}}
              for key, variable in (("accesskey", "AWS_ACCESS_KEY_ID"),
                                    ("secretkey", "AWS_SECRET_ACCESS_KEY")))).to_dict()}
  # The launcher's own pod only watches the TrainJob: it asks for nothing.
  trainer_resources = trainer.get("resources", {})
  assert not trainer_resources, trainer_resources
  assert custom_config["trainer"]["distribution_strategy"] == "multi_worker_mirrored"
