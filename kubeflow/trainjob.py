"""The Kubeflow Trainer TrainJob that runs the Trainer step on several nodes, with the env each
node builds its TF_CONFIG from (docs/kubeflow.md, "Several Trainer nodes"). Imports no TFX.
"""
import dataclasses
import hashlib
import os
import re
from typing import Dict, List, Sequence, Tuple

import yaml

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
PLURAL = "trainjobs"
MANIFEST_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifests")
RUNTIME_FILE = os.path.join(MANIFEST_DIR, "cluster_training_runtime.yaml")
RBAC_FILE = os.path.join(MANIFEST_DIR, "launcher_rbac.yaml")
RUNTIME_NAME = "tfx-tensorflow-multi-worker"  # That file's ClusterTrainingRuntime.
NODE = "node"  # The trainer's replicated Job and container (kubeflow/trainer constants.Node).
WORKER_PORT = 29500  # kubeflow/trainer constants.ContainerTrainerPort.
# A pod label JobSet puts on every pod of the set (kubernetes-sigs/jobset, JobSetNameKey).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# The pod annotation of an Indexed Job's pod (Kubernetes batch/v1 JobCompletionIndexAnnotation).
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

# What a node's pod environment holds: the first is set by Kubernetes in every container of an
# Indexed Job's pod, the others by the TrainJob's trainer.env.
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
NAME_ENV = "TRAINJOB_NAME"
NUM_NODES_ENV = "TRAINJOB_NUM_NODES"
PORT_ENV = "TRAINJOB_WORKER_PORT"

LABEL_PREFIX = "pipelines.kubeflow.org/tfx-"
NAME_PREFIX = "tfx-trainer-"
LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclasses.dataclass(frozen=True)
class NodePlacement:
  """What each node's pod gets besides the image and command: its resources (a Kubernetes
  ResourceRequirements), where it may run, and extra env (e.g. Secret keys as variables)."""
  resources: Dict = dataclasses.field(default_factory=dict)
  node_selector: Dict[str, str] = dataclasses.field(default_factory=dict)
  tolerations: Tuple[Dict, ...] = ()
  env: Tuple[Dict, ...] = ()  # Kubernetes EnvVar objects (value or valueFrom.secretKeyRef).

  def to_dict(self) -> dict:
    return {"resources": dict(self.resources), "node_selector": dict(self.node_selector),
            "tolerations": [dict(t) for t in self.tolerations], "env": [dict(e) for e in self.env]}

  @classmethod
  def from_dict(cls, values: dict) -> "NodePlacement":
    return cls(resources=dict(values.get("resources", {})),
               node_selector=dict(values.get("node_selector", {})),
               tolerations=tuple(values.get("tolerations", ())), env=tuple(values.get("env", ())))


def trainjob_name(identity: str) -> str:
  """A TrainJob name fixed by what identifies one execution of the step (the same string on a
  retry of the launcher pod), short enough for its pods' hostnames (63 characters)."""
  return NAME_PREFIX + hashlib.sha256(identity.encode()).hexdigest()[:16]


def node_hostnames(name: str, num_nodes: int) -> List[str]:
  """The DNS names of a TrainJob's nodes, in completion-index order: `<pod hostname>.<subdomain>`
  as JobSet names them (kubeflow/trainer jobset.go syncPodNetwork, one replica of `node`)."""
  return [f"{name}-{NODE}-0-{index}.{name}" for index in range(num_nodes)]


def trainjob_manifest(name: str, namespace: str, image: str, command: Sequence[str],
                      num_nodes: int, placement: NodePlacement = NodePlacement(),
                      labels: Dict[str, str] = None) -> dict:
  """The TrainJob of `num_nodes` nodes, each running `command` in `image` on our runtime."""
  if num_nodes < 1:
    raise ValueError(f"A TrainJob needs at least one node, not {num_nodes}.")
  env = [{"name": NAME_ENV, "value": name}, {"name": NUM_NODES_ENV, "value": str(num_nodes)},
         {"name": PORT_ENV, "value": str(WORKER_PORT)}]
  ours = {variable["name"] for variable in env}
  clashes = sorted(ours & {variable["name"] for variable in placement.env})
  if clashes:
    raise ValueError(f"The node env must not set {clashes}: the TrainJob sets them.")
  trainer = {"image": image, "command": list(command), "numNodes": num_nodes,
             "env": list(placement.env) + env}
  if placement.resources:
    trainer["resourcesPerNode"] = dict(placement.resources)
  spec = {"runtimeRef": {"name": RUNTIME_NAME, "apiGroup": GROUP,
                         "kind": "ClusterTrainingRuntime"},
          "trainer": trainer}
  pod_spec = {}
  if placement.node_selector:
    pod_spec["nodeSelector"] = dict(placement.node_selector)
  if placement.tolerations:
    pod_spec["tolerations"] = [dict(toleration) for toleration in placement.tolerations]
  if pod_spec:
    spec["runtimePatches"] = [{
        "manager": "pipelines.kubeflow.org/tfx-trainer",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
            "name": NODE, "template": {"spec": {"template": {"spec": pod_spec}}}}]}}}}]
  metadata = {"name": name, "namespace": namespace}
  if labels:
    metadata["labels"] = {LABEL_PREFIX + key: LABEL_VALUE.sub("-", value)[:63].strip("-_.")
                          for key, value in labels.items()}
  return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob", "metadata": metadata,
          "spec": spec}


def load_manifests(path: str) -> List[dict]:
  with open(path) as f:
    return [document for document in yaml.safe_load_all(f) if document]
