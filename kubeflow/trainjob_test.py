"""The TrainJob, runtime and RBAC manifests, checked against Kubeflow Trainer's published API
models (kubeflow-trainer-api, which embed the Kubernetes and JobSet types) and the Kubernetes
client's models; and the TF_CONFIG each node builds from its pod environment."""
import json

import pytest
from kubeflow_trainer_api import models
from kubernetes import client as k8s

from kubeflow import trainjob
from kubeflow.trainjob_node import ADDRESS_OVERRIDE_ENV, tf_config

PLACEMENT = trainjob.NodePlacement(
    resources={"limits": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"},
               "requests": {"cpu": "6", "memory": "30Gi"}},
    node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    env=({"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {
        "name": "mlpipeline-minio-artifact", "key": "accesskey"}}},
         {"name": "AWS_ENDPOINT_URL_S3", "value": "http://minio-service.kubeflow:9000"}))


def _round_trip(model_class, manifest):
  """The manifest as the API model reads it and writes it back: equal only when every field is
  known to the model and of the right type (from_dict drops unknown keys)."""
  return model_class.from_dict(manifest).to_dict()


@pytest.mark.parametrize("placement", [trainjob.NodePlacement(), PLACEMENT])
def test_the_trainjob_is_valid_against_kubeflow_trainers_api_models(placement):
  manifest = trainjob.trainjob_manifest("tfx-trainer-0123", "team-a", "registry/wrn:3",
                                        ["python", "-m", "kubeflow.trainjob_node", "--x"], 3,
                                        placement, labels={"step": "trainer"})
  assert _round_trip(models.TrainerV1alpha1TrainJob, manifest) == manifest
  spec = manifest["spec"]
  assert spec["runtimeRef"]["name"] == trainjob.RUNTIME_NAME
  assert spec["trainer"]["numNodes"] == 3
  env = {variable["name"]: variable for variable in spec["trainer"]["env"]}
  assert env[trainjob.NUM_NODES_ENV]["value"] == "3"
  assert env[trainjob.NAME_ENV]["value"] == "tfx-trainer-0123"
  if placement.env:
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["key"] == "accesskey"
    assert spec["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "2"
    pod = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
  else:
    assert "runtimePatches" not in spec and "resourcesPerNode" not in spec["trainer"]


def test_a_broken_manifest_does_not_survive_the_round_trip():
  """The check above catches a misspelt field and a wrong type."""
  manifest = trainjob.trainjob_manifest("tfx-trainer-1", "ns", "image", ["true"], 2)
  misspelt = json.loads(json.dumps(manifest))
  misspelt["spec"]["trainer"]["numNode"] = misspelt["spec"]["trainer"].pop("numNodes")
  assert _round_trip(models.TrainerV1alpha1TrainJob, misspelt) != misspelt
  wrong_type = json.loads(json.dumps(manifest))
  wrong_type["spec"]["trainer"]["env"] = [{"name": "A", "value": {"secret": 1}}]
  with pytest.raises(ValueError):
    models.TrainerV1alpha1TrainJob.from_dict(wrong_type)


def test_the_runtime_has_no_ml_policy_and_is_valid():
  [runtime] = trainjob.load_manifests(trainjob.RUNTIME_FILE)
  assert _round_trip(models.TrainerV1alpha1ClusterTrainingRuntime, runtime) == runtime
  assert runtime["metadata"]["name"] == trainjob.RUNTIME_NAME
  policy = runtime["spec"]["mlPolicy"]
  assert set(policy) == {"numNodes"}  # PlainML: no torch, mpi, jax, ... source.
  jobset = runtime["spec"]["template"]["spec"]
  [node] = jobset["replicatedJobs"]
  assert node["name"] == trainjob.NODE
  assert node["template"]["metadata"]["labels"][
      "trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
  assert node["template"]["spec"]["completionMode"] == "Indexed"
  [container] = node["template"]["spec"]["template"]["spec"]["containers"]
  assert container["name"] == trainjob.NODE
  assert container["ports"] == [{"containerPort": trainjob.WORKER_PORT, "protocol": "TCP"}]
  assert jobset["network"]["enableDNSHostnames"] is True


def test_the_launcher_role_is_a_valid_kubernetes_role():
  [role] = trainjob.load_manifests(trainjob.RBAC_FILE)
  api = k8s.ApiClient()
  parsed = api._ApiClient__deserialize(role, "V1Role")  # pylint: disable=protected-access
  assert api.sanitize_for_serialization(parsed) == role
  verbs = {(rule["apiGroups"][0], resource): set(rule["verbs"])
           for rule in role["rules"] for resource in rule["resources"]}
  assert verbs[(trainjob.GROUP, trainjob.PLURAL)] >= {"create", "get", "watch", "delete"}
  assert verbs[("", "pods")] >= {"list"}


def test_names_are_deterministic_and_fit_pod_hostnames():
  name = trainjob.trainjob_name("s3://root/p/run-1/Trainer/x/model\ns3://.../model_run")
  assert name == trainjob.trainjob_name("s3://root/p/run-1/Trainer/x/model\ns3://.../model_run")
  assert name != trainjob.trainjob_name("s3://root/p/run-2/Trainer/x/model\ns3://.../model_run")
  assert len(trainjob.node_hostnames(name, 100)[-1].split(".")[0]) <= 63


def test_node_env_may_not_override_the_trainjobs_own_variables():
  with pytest.raises(ValueError, match=r"The node env must not set \['TRAINJOB_NUM_NODES'\]: the "
                     "TrainJob sets them"):
    trainjob.trainjob_manifest("n", "ns", "image", ["true"], 2, trainjob.NodePlacement(
        env=({"name": trainjob.NUM_NODES_ENV, "value": "9"},)))


def _pod_env(manifest, index):
  """What the node's container sees: the TrainJob's env plus Kubernetes' completion index."""
  env = {v["name"]: v["value"] for v in manifest["spec"]["trainer"]["env"] if "value" in v}
  return {**env, trainjob.COMPLETION_INDEX_ENV: str(index)}


def test_each_node_builds_the_tfjob_format_tf_config_from_its_pod_environment():
  manifest = trainjob.trainjob_manifest("tfx-trainer-ab", "ns", "image", ["true"], 3)
  configs = [tf_config(_pod_env(manifest, index)) for index in range(3)]
  workers = ["tfx-trainer-ab-node-0-0.tfx-trainer-ab:29500",
             "tfx-trainer-ab-node-0-1.tfx-trainer-ab:29500",
             "tfx-trainer-ab-node-0-2.tfx-trainer-ab:29500"]
  for index, config in enumerate(configs):
    assert config == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index},
                      "environment": "cloud"}
  override = {"tfx-trainer-ab-node-0-1.tfx-trainer-ab": "127.0.0.1:4001"}
  config = tf_config({**_pod_env(manifest, 1), ADDRESS_OVERRIDE_ENV: json.dumps(override)})
  assert config["cluster"]["worker"] == [workers[0], "127.0.0.1:4001", workers[2]]


@pytest.mark.parametrize("change, message", [
    ({trainjob.COMPLETION_INDEX_ENV: None},
     r"A TrainJob node needs \['JOB_COMPLETION_INDEX'\] in its environment"),
    ({trainjob.NUM_NODES_ENV: None},
     r"A TrainJob node needs \['TRAINJOB_NUM_NODES'\] in its environment"),
    ({trainjob.COMPLETION_INDEX_ENV: "3"}, "JOB_COMPLETION_INDEX='3' is not a node of "
     "TRAINJOB_NUM_NODES=3"),
])
def test_a_pod_environment_without_what_the_trainjob_sets_is_a_clear_error(change, message):
  manifest = trainjob.trainjob_manifest("t", "ns", "image", ["true"], 3)
  environ = {k: v for k, v in {**_pod_env(manifest, 0), **change}.items() if v is not None}
  with pytest.raises(ValueError, match=message):
    tf_config(environ)


@pytest.mark.parametrize("change, message", [
    ({trainjob.NUM_NODES_ENV: "two"}, "TRAINJOB_NUM_NODES='two' is not a number of nodes"),
    ({trainjob.NUM_NODES_ENV: "0"}, "TRAINJOB_NUM_NODES='0' is not a number of nodes"),
    ({trainjob.NUM_NODES_ENV: ""}, "TRAINJOB_NUM_NODES='' is not a number of nodes"),
    ({trainjob.COMPLETION_INDEX_ENV: "first"}, "JOB_COMPLETION_INDEX='first' is not a node"),
    ({trainjob.COMPLETION_INDEX_ENV: "-1"}, "JOB_COMPLETION_INDEX='-1' is not a node"),
    ({trainjob.NAME_ENV: ""}, "TRAINJOB_NAME='' cannot name the nodes' hosts"),
    ({trainjob.NAME_ENV: "Trainer_1"}, "TRAINJOB_NAME='Trainer_1' cannot name the nodes' hosts"),
    ({trainjob.NAME_ENV: "t" * 60}, f"TRAINJOB_NAME={'t' * 60!r} cannot name the nodes' hosts: "
     f"{'t' * 60}-node-0-2: must be no more than 63 characters"),
    ({trainjob.PORT_ENV: ""}, "TRAINJOB_WORKER_PORT='' is not a port"),
    ({trainjob.PORT_ENV: "http"}, "TRAINJOB_WORKER_PORT='http' is not a port"),
    ({trainjob.PORT_ENV: "70000"}, "TRAINJOB_WORKER_PORT='70000' is not a port"),
    ({ADDRESS_OVERRIDE_ENV: '{"t-node-0-1.t": ":4001"}'},
     "TRAINJOB_ADDRESS_OVERRIDE: ':4001' (for t-node-0-1.t) is not HOST:PORT"),
    ({ADDRESS_OVERRIDE_ENV: '{"t-node-0-1.t": "127.0.0.1:"}'},
     "TRAINJOB_ADDRESS_OVERRIDE: '127.0.0.1:' (for t-node-0-1.t) is not HOST:PORT"),
    ({ADDRESS_OVERRIDE_ENV: "127.0.0.1:4001"}, "TRAINJOB_ADDRESS_OVERRIDE is not JSON"),
])
def test_a_bad_value_in_the_pod_environment_is_named_with_its_variable(change, message):
  manifest = trainjob.trainjob_manifest("t", "ns", "image", ["true"], 3)
  environ = {**_pod_env(manifest, 0), **change}
  with pytest.raises(ValueError) as error:
    tf_config(environ)
  assert str(error.value).startswith(message), str(error.value)
