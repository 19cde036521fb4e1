"""Creates a TrainJob through the Kubernetes API (or re-attaches to a retried launcher's), waits
for it to end, and deletes it when the step is cancelled (docs/kubeflow.md, "Several Trainer
nodes").
"""
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import List, Optional

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from kubeflow import trainjob

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
COMPLETE, FAILED = "Complete", "Failed"
WATCH_SECONDS = 60  # One watch request; the wait re-reads the object and watches again.
DELETE_SECONDS = 300  # For a failed TrainJob's pods to go before it is created again.


class TrainJobFailed(RuntimeError):
  pass


def api_client() -> k8s.ApiClient:
  """The cluster of this pod (its service account), else the kubeconfig's current context."""
  try:
    k8s_config.load_incluster_config()
  except k8s_config.ConfigException:
    k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
  return k8s.ApiClient()


def current_namespace() -> str:
  """This pod's namespace, else the kubeconfig context's, else `default`."""
  if os.path.exists(SERVICE_ACCOUNT_NAMESPACE):
    with open(SERVICE_ACCOUNT_NAMESPACE) as f:
      return f.read().strip()
  try:
    _, context = k8s_config.list_kube_config_contexts(os.environ.get("KUBECONFIG"))
    return context["context"].get("namespace", "default")
  except (k8s_config.ConfigException, KeyError, TypeError):
    return "default"


class TrainJobClient:
  def __init__(self, api: k8s.ApiClient, namespace: str):
    self.namespace = namespace
    self.custom = k8s.CustomObjectsApi(api)
    self.core = k8s.CoreV1Api(api)

  def create_or_attach(self, manifest: dict) -> dict:
    """Creates the TrainJob; one of that name already there (a restarted launcher's) is kept,
    unless it failed: a retried step then gets a new one, which resumes from the checkpoints."""
    name = manifest["metadata"]["name"]
    for _ in range(2):
      try:
        created = self.custom.create_namespaced_custom_object(
            trainjob.GROUP, trainjob.VERSION, self.namespace, trainjob.PLURAL, manifest)
        log.info("Created TrainJob %s/%s (%d nodes).", self.namespace, name,
                 manifest["spec"]["trainer"]["numNodes"])
        return created
      except k8s.ApiException as error:
        if error.status != 409:
          raise RuntimeError(f"Could not create TrainJob {self.namespace}/{name}: "
                             f"{error.status} {error.reason}: {error.body}") from error
      existing = self.get(name)
      if FAILED not in _true_conditions(existing):
        log.info("TrainJob %s/%s exists (an earlier attempt of this step): waiting for it.",
                 self.namespace, name)
        return existing
      log.warning("TrainJob %s/%s of an earlier attempt failed: replacing it.", self.namespace,
                  name)
      self.delete(name)
      self._wait_gone(name)
    raise RuntimeError(f"TrainJob {self.namespace}/{name} is still there after its deletion.")

  def _wait_gone(self, name: str, timeout: float = DELETE_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      try:
        self.get(name)
      except k8s.ApiException as error:
        if error.status == 404:
          return
        raise
      time.sleep(1)
    raise RuntimeError(f"TrainJob {self.namespace}/{name} was not deleted within {timeout:.0f} s.")

  def get(self, name: str) -> dict:
    return self.custom.get_namespaced_custom_object(
        trainjob.GROUP, trainjob.VERSION, self.namespace, trainjob.PLURAL, name)

  def delete(self, name: str) -> None:
    """Deletes the TrainJob and, in the foreground, its JobSet and pods; gone already is fine."""
    try:
      self.custom.delete_namespaced_custom_object(
          trainjob.GROUP, trainjob.VERSION, self.namespace, trainjob.PLURAL, name,
          body=k8s.V1DeleteOptions(propagation_policy="Foreground"))
      log.info("Deleted TrainJob %s/%s.", self.namespace, name)
    except k8s.ApiException as error:
      if error.status != 404:
        raise

  def wait(self, name: str) -> dict:
    """Returns the TrainJob once Complete; raises TrainJobFailed naming the failed nodes."""
    while True:
      job = self.get(name)
      if self._ended(job):
        return job
      stream = k8s_watch.Watch().stream(
          self.custom.list_namespaced_custom_object, trainjob.GROUP, trainjob.VERSION,
          self.namespace, trainjob.PLURAL, field_selector=f"metadata.name={name}",
          resource_version=job["metadata"].get("resourceVersion"), timeout_seconds=WATCH_SECONDS)
      try:
        for event in stream:
          if event["type"] == "DELETED":
            raise TrainJobFailed(f"TrainJob {self.namespace}/{name} was deleted before it ended.")
          if event["type"] != "ERROR" and self._ended(event["object"]):
            return event["object"]
      except k8s.ApiException as error:
        if error.status != 410:  # Gone: the version is too old to watch from; read again.
          raise

  def _ended(self, job: dict) -> bool:
    conditions = _true_conditions(job)
    if FAILED in conditions:
      condition = conditions[FAILED]
      raise TrainJobFailed(
          f"TrainJob {self.namespace}/{job['metadata']['name']} failed "
          f"({condition.get('reason', '')}: {condition.get('message', '')}). "
          + "; ".join(self.failed_nodes(job["metadata"]["name"])))
    return COMPLETE in conditions

  def failed_nodes(self, name: str) -> List[str]:
    """Why each failed node's pod stopped, by completion index."""
    pods = self.core.list_namespaced_pod(
        self.namespace, label_selector=f"{trainjob.JOBSET_NAME_LABEL}={name}").items
    reasons = []
    for pod in sorted(pods, key=lambda pod: pod.metadata.name):
      index = (pod.metadata.annotations or {}).get(trainjob.COMPLETION_INDEX_ANNOTATION, "?")
      for status in (pod.status.container_statuses or []) if pod.status else []:
        terminated = status.state.terminated if status.state else None
        if terminated is not None and terminated.exit_code != 0:
          reasons.append(f"node {index} (pod {pod.metadata.name}): container {status.name} "
                         f"exited {terminated.exit_code} ({terminated.reason or 'no reason'})"
                         + (f": {terminated.message.strip()}" if terminated.message else ""))
      if pod.status and pod.status.phase == "Failed" and not any(
          reason.startswith(f"node {index} (pod {pod.metadata.name})") for reason in reasons):
        reasons.append(f"node {index} (pod {pod.metadata.name}): {pod.status.reason or 'Failed'}"
                       + (f": {pod.status.message}" if pod.status.message else ""))
    return reasons or ["no failed node pod found"]


def _true_conditions(job: dict) -> dict:
  return {c["type"]: c for c in job.get("status", {}).get("conditions", [])
          if c.get("status") == "True"}


def run_to_completion(job_client: TrainJobClient, manifest: dict,
                      install_cancel_handler: bool = True) -> dict:
  """Creates (or attaches to) the TrainJob and waits for it; SIGTERM (a cancelled run stops
  the launcher pod) deletes it and ends the process with 128 + the signal."""
  name = manifest["metadata"]["name"]
  cancelled = threading.Event()

  def delete_and_exit(code: int) -> None:
    log.warning("Cancelled: deleting TrainJob %s/%s.", job_client.namespace, name)
    try:
      job_client.delete(name)
    except Exception:  # pylint: disable=broad-except
      log.exception("Could not delete TrainJob %s/%s: delete it by hand.", job_client.namespace,
                    name)
    finally:
      _exit_at_once(code)

  def cancel(signum, frame):
    # Only starts the deletion. The handler runs on the main thread between two bytecodes:
    # perhaps holding a lock the deletion needs (urllib3's connection pool: a deadlock), or
    # inside a finaliser, which swallows the handler's exceptions, SystemExit included.
    if not cancelled.is_set():
      cancelled.set()
      threading.Thread(target=delete_and_exit, args=(128 + signum,), daemon=True).start()

  handles_cancel = install_cancel_handler and threading.current_thread() is threading.main_thread()
  previous = signal.signal(signal.SIGTERM, cancel) if handles_cancel else None
  try:
    job_client.create_or_attach(manifest)
    return job_client.wait(name)
  finally:
    if cancelled.is_set():  # Whatever the wait saw of the deletion: that thread ends the process.
      threading.Event().wait()
    if handles_cancel:
      signal.signal(signal.SIGTERM, previous)


def _exit_at_once(code: int) -> None:
  """Ends the process from any thread, at once."""
  logging.shutdown()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


def main(argv: Optional[List[str]] = None) -> None:
  """`python -m kubeflow.trainjob_client MANIFEST.json`: runs one TrainJob (what the step does,
  without TFX; for operators and tests)."""
  logging.basicConfig(level=logging.INFO)
  argv = sys.argv[1:] if argv is None else argv
  with open(argv[0]) as f:
    manifest = json.load(f)
  job_client = TrainJobClient(api_client(), manifest["metadata"]["namespace"])
  try:
    run_to_completion(job_client, manifest)
  except TrainJobFailed as error:
    print(error, file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  main()
