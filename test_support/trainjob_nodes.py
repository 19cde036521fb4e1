"""A TrainJob's nodes as local processes, and a stand-in for Kubeflow Trainer that runs them.

Each node is started with the TrainJob's command and exactly the environment its pod gets: the
TrainJob's `trainer.env` plus Kubernetes' JOB_COMPLETION_INDEX; the one override,
TRAINJOB_ADDRESS_OVERRIDE, maps the nodes' DNS names to 127.0.0.1 ports. `LocalTrainJobs`
plays the cluster for the KFP harness: a Kubernetes API stand-in (test_support/kube_api.py) whose
TrainJobs run that way and then get the `Complete` or `Failed` condition, with a failed node's
pod status, as Kubeflow Trainer and JobSet would set them.
"""
import json
import os
import socket
import subprocess
import sys
import threading
from typing import Dict, List, Mapping, Optional, Tuple

from kubeflow import trainjob
from kubeflow.trainjob_node import ADDRESS_OVERRIDE_ENV
from test_support.kube_api import KubeApi, write_kubeconfig

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Node = Tuple[subprocess.Popen, str]  # The process and its log file.


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def pod_env(manifest: dict, index: int,
            secrets: Optional[Mapping[str, Mapping[str, str]]] = None) -> Dict[str, str]:
  """What node `index`'s container is given: the TrainJob's env, its Secret keys resolved from
  `secrets` (name -> key -> value) as the kubelet resolves a secretKeyRef, and its completion
  index. A missing Secret or key fails, as the pod would not start."""
  env = {}
  for variable in manifest["spec"]["trainer"]["env"]:
    if "value" in variable:
      env[variable["name"]] = variable["value"]
    else:
      ref = variable["valueFrom"]["secretKeyRef"]
      value = (secrets or {}).get(ref["name"], {}).get(ref["key"])
      if value is None:
        raise ValueError(f"CreateContainerConfigError: secret {ref['name']!r} has no key "
                         f"{ref['key']!r} (env {variable['name']})")
      env[variable["name"]] = value
  return {**env, trainjob.COMPLETION_INDEX_ENV: str(index)}


def start_nodes(manifest: dict, log_dir: str, base_env: Optional[Mapping[str, str]] = None,
                attempt: int = 0,
                secrets: Optional[Mapping[str, Mapping[str, str]]] = None) -> List[Node]:
  """Every node of the TrainJob as a process of this machine; logs `node-<i>-<attempt>.log`."""
  name = manifest["metadata"]["name"]
  num_nodes = manifest["spec"]["trainer"]["numNodes"]
  override = {host: f"127.0.0.1:{_free_port()}"
              for host in trainjob.node_hostnames(name, num_nodes)}
  base = dict(os.environ if base_env is None else base_env)
  base.pop("TF_CONFIG", None)
  os.makedirs(log_dir, exist_ok=True)
  nodes = []
  for index in range(num_nodes):
    env = {**base, **pod_env(manifest, index, secrets), ADDRESS_OVERRIDE_ENV: json.dumps(override),
           "PYTHONPATH": PROJECT_DIR,
           # The image's `python` is this environment's interpreter.
           "PATH": os.path.dirname(sys.executable) + os.pathsep + base.get("PATH", "")}
    log_path = os.path.join(log_dir, f"node-{index}-{attempt}.log")
    with open(log_path, "w") as log:
      nodes.append((subprocess.Popen(manifest["spec"]["trainer"]["command"], cwd=PROJECT_DIR,
                                     env=env, stdout=log, stderr=subprocess.STDOUT), log_path))
  return nodes


def wait_nodes(nodes: List[Node], timeout: float = 900) -> List[int]:
  """Exit codes; a node still running at the timeout is killed (and counts as failed)."""
  codes = []
  for process, _ in nodes:
    try:
      codes.append(process.wait(timeout=timeout))
    except subprocess.TimeoutExpired:
      process.kill()
      codes.append(process.wait())
  return codes


class LocalTrainJobs:
  """The cluster a TrainJob launcher talks to (via KUBECONFIG), its nodes run here."""

  def __init__(self, workdir: str, base_env: Optional[Mapping[str, str]] = None,
               namespace: str = "kubeflow-user", node_timeout: float = 900,
               secrets: Optional[Mapping[str, Mapping[str, str]]] = None):
    """secrets: the namespace's Secrets (name -> key -> value) the nodes' env may name."""
    self.workdir = workdir
    self.base_env = dict(os.environ if base_env is None else base_env)
    self.secrets = secrets or {}
    self.namespace = namespace
    self.node_timeout = node_timeout
    self.api = KubeApi()
    self.runs: Dict[str, List[int]] = {}  # TrainJob name -> its nodes' exit codes.
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._controller, daemon=True)

  def __enter__(self) -> "LocalTrainJobs":
    os.makedirs(self.workdir, exist_ok=True)
    self.api.__enter__()
    self.kubeconfig = write_kubeconfig(os.path.join(self.workdir, "kubeconfig"), self.api.url,
                                       self.namespace)
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    with self.api.changed:
      self.api.changed.notify_all()
    self._thread.join(timeout=10)
    self.api.__exit__(*exc)

  def environ(self) -> Dict[str, str]:
    """What a task process needs to reach this cluster."""
    return {"KUBECONFIG": self.kubeconfig}

  def _controller(self) -> None:
    seen = 0
    while not self._stop.is_set():
      with self.api.changed:
        new = [event for event in self.api.events if event[0] > seen]
        if not new:
          self.api.changed.wait(0.5)
          continue
      seen = new[-1][0]
      for _, plural, kind, obj in new:
        if plural == trainjob.PLURAL and kind == "ADDED":
          threading.Thread(target=self._run, args=(obj,), daemon=True).start()

  def _run(self, manifest: dict) -> None:
    name = manifest["metadata"]["name"]
    try:
      nodes = start_nodes(manifest, os.path.join(self.workdir, name), self.base_env,
                          secrets=self.secrets)
    except ValueError as error:  # A pod that cannot start: the TrainJob fails, saying why.
      self.runs[name] = []
      self.api.set_status(trainjob.PLURAL, self.namespace, name, {"conditions": [{
          "type": "Failed", "reason": "CreateContainerConfigError", "message": str(error),
          "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
      return
    codes = wait_nodes(nodes, self.node_timeout)
    self.runs[name] = codes
    failed = [index for index, code in enumerate(codes) if code != 0]
    # A container killed by a signal exits 128 + its number, as the kubelet reports it.
    self.api.pods[self.namespace] = [_pod(name, self.namespace, index,
                                          128 - code if code < 0 else code)
                                     for index, code in enumerate(codes)]
    condition = ({"type": "Failed", "reason": "FailedJobs",
                  "message": f"jobset failed: nodes {failed} failed"} if failed else
                 {"type": "Complete", "reason": "JobSetCompleted", "message": ""})
    if (trainjob.PLURAL, self.namespace, name) in self.api.objects:
      self.api.set_status(trainjob.PLURAL, self.namespace, name, {"conditions": [
          dict(condition, status="True", lastTransitionTime="2026-01-01T00:00:00Z")]})


def _pod(name: str, namespace: str, index: int, exit_code: int) -> dict:
  """A node's pod once its container ended, as the kubelet reports it."""
  return {"metadata": {"name": f"{name}-{trainjob.NODE}-0-{index}-local", "namespace": namespace,
                       "labels": {trainjob.JOBSET_NAME_LABEL: name},
                       "annotations": {trainjob.COMPLETION_INDEX_ANNOTATION: str(index)}},
          "status": {"phase": "Failed" if exit_code else "Succeeded", "containerStatuses": [{
              "name": trainjob.NODE, "ready": False, "restartCount": 0, "image": "", "imageID": "",
              "state": {"terminated": {"exitCode": exit_code,
                                       "reason": "Error" if exit_code else "Completed"}}}]}}
