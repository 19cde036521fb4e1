"""The TrainJob launcher against a Kubernetes API (testing/kube_api.py on 127.0.0.1): create,
watch to success, watch to a failed node, a restarted launcher re-attaches, cancel deletes."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from kubernetes import client as k8s

from kubeflow import trainjob
from kubeflow.trainjob_client import TrainJobClient, TrainJobFailed, run_to_completion
from testing.kube_api import KubeApi, write_kubeconfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "team-a"


@pytest.fixture
def api():
  with KubeApi() as server:
    yield server


def job_client(api):
  configuration = k8s.Configuration()
  configuration.host = api.url
  return TrainJobClient(k8s.ApiClient(configuration), NAMESPACE)


def manifest(name="tfx-trainer-0123456789abcdef"):
  return trainjob.trainjob_manifest(name, NAMESPACE, "registry/wrn:1", ["true"], 2)


def when_created(api, name, then, timeout=30):
  """Runs then() once the TrainJob exists (what the Trainer controller reacts to)."""
  def controller():
    deadline = time.monotonic() + timeout
    while (trainjob.PLURAL, NAMESPACE, name) not in api.objects:
      if time.monotonic() > deadline:
        return
      time.sleep(0.02)
    time.sleep(0.2)  # The launcher is watching by now, or reads the status first: both work.
    then()
  thread = threading.Thread(target=controller, daemon=True)
  thread.start()
  return thread


def condition(kind, reason="", message=""):
  return {"conditions": [{"type": kind, "status": "True", "reason": reason, "message": message,
                          "lastTransitionTime": "2026-11-26T09:00:00Z"}]}


def node_pod(name, index, exit_code, reason):
  return {"metadata": {"name": f"{name}-node-0-{index}-x7k2p", "namespace": NAMESPACE,
                       "labels": {trainjob.JOBSET_NAME_LABEL: name},
                       "annotations": {trainjob.COMPLETION_INDEX_ANNOTATION: str(index)}},
          "status": {"phase": "Failed" if exit_code else "Running", "containerStatuses": [{
              "name": "node", "ready": False, "restartCount": 0, "image": "i", "imageID": "",
              "state": {"terminated": {"exitCode": exit_code, "reason": reason}}
              if exit_code else {"running": {}}}]}}


def test_creates_the_trainjob_and_watches_it_to_success(api):
  job = manifest()
  name = job["metadata"]["name"]
  when_created(api, name, lambda: api.set_status(trainjob.PLURAL, NAMESPACE, name,
                                                 condition("Complete", "JobSetCompleted")))
  result = run_to_completion(job_client(api), job, install_cancel_handler=False)
  assert result["status"]["conditions"][0]["type"] == "Complete"
  assert [e[2] for e in api.events] == ["ADDED", "MODIFIED"]
  created = api.events[0][3]
  assert created["spec"] == job["spec"]
  path = f"/apis/{trainjob.GROUP}/{trainjob.VERSION}/namespaces/{NAMESPACE}/{trainjob.PLURAL}"
  assert ("POST", path) in api.requests


def test_a_failed_node_fails_the_step_naming_the_node_and_why(api):
  job = manifest()
  name = job["metadata"]["name"]

  def fail():
    api.pods[NAMESPACE] = [node_pod(name, 0, 0, ""), node_pod(name, 1, 137, "OOMKilled"),
                           node_pod("another-job", 1, 1, "Error")]
    api.set_status(trainjob.PLURAL, NAMESPACE, name,
                   condition("Failed", "FailedJobs", "jobset failed: node-0 failed"))
  when_created(api, name, fail)
  with pytest.raises(TrainJobFailed) as failure:
    run_to_completion(job_client(api), job, install_cancel_handler=False)
  message = str(failure.value)
  assert f"TrainJob {NAMESPACE}/{name} failed (FailedJobs: jobset failed" in message
  assert (f"node 1 (pod {name}-node-0-1-x7k2p): container node exited 137 (OOMKilled)"
          in message)
  assert "node 0" not in message and "another-job" not in message


def test_a_restarted_launcher_attaches_to_the_trainjob_it_made(api):
  job = manifest()
  name = job["metadata"]["name"]
  first_results = []
  first = threading.Thread(  # The launcher pod that dies while waiting (its watch goes on).
      target=lambda: first_results.append(run_to_completion(job_client(api), job, False)),
      daemon=True)
  first.start()
  while (trainjob.PLURAL, NAMESPACE, name) not in api.objects:
    time.sleep(0.02)
  when_created(api, name, lambda: api.set_status(trainjob.PLURAL, NAMESPACE, name,
                                                 condition("Complete")))
  result = run_to_completion(job_client(api), job, install_cancel_handler=False)
  assert result["status"]["conditions"][0]["type"] == "Complete"
  assert [e[2] for e in api.events].count("ADDED") == 1  # One TrainJob, never a second.
  assert [method for method, _ in api.requests].count("POST") == 2  # The second got 409.
  first.join(timeout=60)  # Done before the API server stops: it watched the same TrainJob.
  assert [r["status"]["conditions"][0]["type"] for r in first_results] == ["Complete"]


def test_a_retried_step_replaces_a_trainjob_that_failed(api):
  job = manifest()
  name = job["metadata"]["name"]
  api.record(trainjob.PLURAL, "ADDED", {**job, "status": condition("Failed", "FailedJobs")})
  job_client(api).create_or_attach(job)
  assert [e[2] for e in api.events] == ["ADDED", "DELETED", "ADDED"]
  assert "status" not in api.objects[(trainjob.PLURAL, NAMESPACE, name)]


def test_a_trainjob_of_another_step_is_not_taken_for_this_one(api):
  """Names differ by the step's outputs (kubeflow/trainjob_launcher.py); only equal names attach."""
  job_client(api).create_or_attach(manifest("tfx-trainer-aaaa"))
  job_client(api).create_or_attach(manifest("tfx-trainer-bbbb"))
  assert sorted(key[2] for key in api.objects) == ["tfx-trainer-aaaa", "tfx-trainer-bbbb"]


def test_a_cancelled_run_deletes_the_trainjob(api, tmp_path):
  """KFP stops a cancelled run's pods (SIGTERM): the launcher deletes its TrainJob and exits."""
  kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), api.url, NAMESPACE)
  job = manifest()
  (tmp_path / "trainjob.json").write_text(json.dumps(job))
  process = subprocess.Popen(
      [sys.executable, "-m", "kubeflow.trainjob_client", str(tmp_path / "trainjob.json")],
      cwd=REPO, env={**os.environ, "KUBECONFIG": kubeconfig, "PYTHONPATH": REPO},
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  deadline = time.monotonic() + 60
  while not any(method == "GET" and "trainjobs" in path and job["metadata"]["name"] in path
                for method, path in api.requests):  # Created, and waiting.
    assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
    time.sleep(0.05)
  process.send_signal(signal.SIGTERM)
  output = process.communicate(timeout=60)[0]
  assert process.returncode == 128 + signal.SIGTERM, output
  assert [e[2] for e in api.events] == ["ADDED", "DELETED"], output
  assert not api.objects
  assert "Cancelled: deleting TrainJob" in output


# A launcher whose SIGTERM lands where the old handler (delete, then sys.exit) failed.
CANCELLED_LAUNCHER = """
import signal, sys, threading
from kubeflow import trainjob_client

pool = threading.Lock()  # Like urllib3's connection pool: not reentrant.

class Response:  # Like an HTTP response whose __del__ closes it.
  def __del__(self):
    signal.raise_signal(signal.SIGTERM)

class JobClient:
  namespace = "team-a"
  def create_or_attach(self, manifest):
    pass
  def delete(self, name):
    with pool:
      print("deleted", name, flush=True)
  def wait(self, name):
    if sys.argv[1] == "in a finaliser":  # Which swallows exceptions, SystemExit too.
      Response()
    else:  # "holding a lock the deletion needs"
      with pool:
        signal.raise_signal(signal.SIGTERM)
    return {}  # The main thread goes on (printing nothing: only the deleting thread writes).

trainjob_client.run_to_completion(JobClient(), {"metadata": {"name": "tfx-trainer-x"}})
"""


@pytest.mark.parametrize("where", ["in a finaliser", "holding a lock the deletion needs"])
def test_a_cancel_wherever_the_signal_lands_deletes_the_trainjob_and_ends_the_launcher(where):
  """Python runs the handler on the main thread between two bytecodes, wherever that is."""
  result = subprocess.run([sys.executable, "-c", CANCELLED_LAUNCHER, where], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True,
                          timeout=60)
  assert result.returncode == 128 + signal.SIGTERM, result.stdout + result.stderr
  assert "deleted tfx-trainer-x" in result.stdout.splitlines()


def test_the_cancel_handler_is_removed_once_the_trainjob_has_ended(api):
  job = manifest()
  when_created(api, job["metadata"]["name"], lambda: api.set_status(
      trainjob.PLURAL, NAMESPACE, job["metadata"]["name"], condition("Complete")))
  def before(signum, frame):  # Not the default: restoring must mean this one, not SIG_DFL.
    raise AssertionError("the previous handler ran")

  original = signal.signal(signal.SIGTERM, before)
  try:
    run_to_completion(job_client(api), job)
    assert signal.getsignal(signal.SIGTERM) is before
  finally:
    signal.signal(signal.SIGTERM, original)
