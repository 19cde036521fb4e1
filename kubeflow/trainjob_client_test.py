"""The TrainJob launcher against a Kubernetes API server stand-in that really watches
(test_support/kube_api.py on 127.0.0.1): create, watch to success, watch to a failed node, a
restarted launcher re-attaches, cancel deletes; and the same through a flaky API server: 5xx,
429, resets, lost answers, hung connections, watches that end or expire, a TrainJob deleted
under the launcher, each ridden out or named, with the requests counted."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from kubeflow import trainjob
from kubeflow.trainjob_client import (KubernetesApiError, Patience, TrainJobClient,
                                      TrainJobFailed, TrainJobGone, api_client,
                                      run_to_completion)
from test_support import kube_api
from test_support.kube_api import KubeApi, write_kubeconfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "team-a"
# The launcher's patience in seconds, short enough for tests.
FAST = Patience(request_seconds=0.5, watch_seconds=2, first_retry_seconds=0.05,
                longest_retry_seconds=0.2, outage_seconds=1.5, cancel_seconds=1.0,
                watch_interval_seconds=0.1, gone_seconds=5)


@pytest.fixture
def api():
  with KubeApi() as server:
    yield server


def client_of(api):
  configuration = k8s.Configuration()
  configuration.host = api.url
  return api_client(configuration)


def job_client(api, patience=Patience()):
  return TrainJobClient(client_of(api), NAMESPACE, patience)


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
  # One read, then one watch that stays open until the TrainJob ends: no polling.
  assert (api.count("create"), api.count("get"), api.count("watch")) in ((1, 1, 1), (1, 1, 0))


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
  def delete_leaving_nothing(self, name):
    with pool:
      print("deleted", name, flush=True)
    return True, "deleted"
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


def run_with_deadline(target, seconds):
  """target()'s result or exception; a launcher still running after `seconds` fails the test
  (a hung launcher must not hang the suite)."""
  outcome = {}

  def body():
    try:
      outcome["result"] = target()
    except BaseException as error:  # pylint: disable=broad-except
      outcome["error"] = error
  thread = threading.Thread(target=body, daemon=True)
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), f"the launcher was still running after {seconds} s"
  if "error" in outcome:
    raise outcome["error"]
  return outcome["result"]


def launch(api, job, patience=FAST, seconds=20):
  return run_with_deadline(
      lambda: run_to_completion(job_client(api, patience), job, install_cancel_handler=False),
      seconds)


def until(check, seconds=10):
  deadline = time.monotonic() + seconds
  while not check():
    assert time.monotonic() < deadline, "timed out"
    time.sleep(0.01)


def complete_when_created(api, name, delay=0.2):
  return when_created(api, name, lambda: (time.sleep(delay), api.set_status(
      trainjob.PLURAL, NAMESPACE, name, condition("Complete"))))


def test_the_stand_in_streams_a_watch_as_the_api_server_does(api):
  """The client's own Watch against the stand-in: `watch=True` is a watch, events arrive on the
  open request as they happen, from the version asked, and a forgotten version is Expired."""
  job = manifest()
  name = job["metadata"]["name"]
  api.record(trainjob.PLURAL, "ADDED", job)
  custom = k8s.CustomObjectsApi(client_of(api))
  seen = []

  def watch():
    for event in k8s_watch.Watch().stream(
        custom.list_namespaced_custom_object, trainjob.GROUP, trainjob.VERSION, NAMESPACE,
        trainjob.PLURAL, resource_version="1", timeout_seconds=5):
      seen.append((event["type"], event["raw_object"]["metadata"]["resourceVersion"],
                   time.monotonic()))
      if len(seen) == 2:
        return
  watcher = threading.Thread(target=watch, daemon=True)
  watcher.start()
  until(lambda: api.count("watch") == 1)
  api.set_status(trainjob.PLURAL, NAMESPACE, name, condition("Running"))
  until(lambda: len(seen) == 1)  # Delivered while the request is still open.
  time.sleep(0.2)
  changed = time.monotonic()
  api.delete(trainjob.PLURAL, NAMESPACE, name)
  watcher.join(5)
  assert [(kind, version) for kind, version, _ in seen] == [("MODIFIED", "2"), ("DELETED", "3")]
  assert seen[1][2] - changed < 0.15
  assert api.count("watch") == 1 and api.calls[-1].query["watch"] == "True"
  api.compact()
  with pytest.raises(k8s.ApiException) as expired:
    list(k8s_watch.Watch().stream(custom.list_namespaced_custom_object, trainjob.GROUP,
                                  trainjob.VERSION, NAMESPACE, trainjob.PLURAL,
                                  resource_version="2", timeout_seconds=5))
  assert expired.value.status == 410


@pytest.mark.parametrize("faults", [(500, kube_api.RESET), (503, 429), (kube_api.HANG,)],
                         ids=["500-reset", "503-429", "hang"])
def test_create_is_retried_and_makes_one_trainjob(api, faults):
  api.fail("create", *faults)
  job = manifest()
  complete_when_created(api, job["metadata"]["name"])
  assert launch(api, job)["status"]["conditions"][0]["type"] == "Complete"
  assert [e[2] for e in api.events] == ["ADDED", "MODIFIED"]
  assert api.count("create") == len(faults) + 1


def test_a_create_whose_answer_is_lost_attaches_to_the_trainjob_it_made(api):
  api.fail("create", kube_api.LOST)  # Created, then the connection is reset.
  job = manifest()
  complete_when_created(api, job["metadata"]["name"])
  assert launch(api, job)["status"]["conditions"][0]["type"] == "Complete"
  assert [e[2] for e in api.events] == ["ADDED", "MODIFIED"]
  assert api.count("create") == 2  # The second answered 409: it is there.


@pytest.mark.parametrize("action, faults", [
    ("get", (500, kube_api.RESET)), ("watch", (500, 502, kube_api.RESET)),
    ("watch", (429, kube_api.CUT)), ("get", (kube_api.HANG,)), ("watch", (kube_api.HANG,))],
    ids=["get-500-reset", "watch-5xx-reset", "watch-429-cut", "get-hangs", "watch-hangs"])
def test_a_blip_while_waiting_is_ridden_out_and_the_trainjob_kept(api, action, faults):
  api.fail(action, *faults)
  job = manifest()
  complete_when_created(api, job["metadata"]["name"])
  started = time.monotonic()
  assert launch(api, job)["status"]["conditions"][0]["type"] == "Complete"
  # A hung call is given up after its timeout (the watch's: its length plus the request's).
  assert time.monotonic() - started < FAST.watch_seconds + 2 * FAST.request_seconds + 2
  assert [e[2] for e in api.events] == ["ADDED", "MODIFIED"]  # Never deleted.


def test_a_watch_the_server_ends_is_resumed_from_the_last_version_seen(api):
  job = manifest()
  name = job["metadata"]["name"]
  launcher = threading.Thread(target=launch, args=(api, job), daemon=True)
  launcher.start()
  until(lambda: api.count("watch") == 1)
  api.set_status(trainjob.PLURAL, NAMESPACE, name, condition("Running"))  # Version 2.
  time.sleep(0.2)
  api.end_watches()
  until(lambda: api.count("watch") == 2)
  api.set_status(trainjob.PLURAL, NAMESPACE, name, condition("Complete"))
  launcher.join(10)
  assert not launcher.is_alive()
  watches = [call.query["resourceVersion"] for call in api.calls if call.action == "watch"]
  assert watches == ["1", "2"]
  assert api.count("get") == 1  # Not read again: watched on from where it was.


def _expire_history_between_watches(api, name, change):
  """Ends the open watch and, before the launcher watches again, changes the TrainJob and
  forgets the history, so its next watch from the version it saw is Expired (410)."""
  until(lambda: api.count("watch") == 1)
  api.end_watches()
  change()
  api.compact()


def test_a_watch_from_an_expired_version_reads_the_trainjob_again_and_watches_on(api):
  job = manifest()
  name = job["metadata"]["name"]
  slow = Patience(**{**FAST.__dict__, "watch_interval_seconds": 0.5})
  launcher = threading.Thread(target=launch, args=(api, job, slow), daemon=True)
  launcher.start()
  _expire_history_between_watches(api, name, lambda: api.set_status(
      trainjob.PLURAL, NAMESPACE, name, condition("Running")))
  until(lambda: api.count("watch") == 3)
  api.set_status(trainjob.PLURAL, NAMESPACE, name, condition("Complete"))
  launcher.join(10)
  assert not launcher.is_alive()
  watches = [call.query["resourceVersion"] for call in api.calls if call.action == "watch"]
  assert watches == ["1", "1", "2"]  # Expired, read afresh (version 2), watched from there.
  assert api.count("get") == 2


@pytest.mark.parametrize("when", ["while watching", "between watches"])
def test_a_trainjob_deleted_before_it_ends_fails_the_step_naming_it(api, when):
  job = manifest()
  name = job["metadata"]["name"]
  slow = Patience(**{**FAST.__dict__, "watch_interval_seconds": 0.5})
  delete = lambda: api.delete(trainjob.PLURAL, NAMESPACE, name)
  if when == "while watching":
    when_created(api, name, delete)
  else:
    threading.Thread(target=_expire_history_between_watches, args=(api, name, delete),
                     daemon=True).start()
  with pytest.raises(TrainJobGone, match=f"TrainJob {NAMESPACE}/{name} was deleted before it "
                     "ended"):
    launch(api, job, slow)


def test_watches_that_end_at_once_are_not_repeated_faster_than_the_interval(api):
  """The old stand-in answered the client's watch=True as a list: the launcher then asked
  2,003 times in 3 s."""
  api.fail_always("watch", kube_api.ENDED)
  job = manifest()
  name = job["metadata"]["name"]
  launcher = threading.Thread(target=launch, args=(api, job), daemon=True)
  launcher.start()
  until(lambda: api.count("watch") >= 1)
  started = time.monotonic()
  time.sleep(1.0)
  watches = api.count("watch", since=started)
  assert watches <= 1.0 / FAST.watch_interval_seconds + 2, watches
  assert api.count("get") == 1
  api.fail_always("watch", None)
  api.set_status(trainjob.PLURAL, NAMESPACE, name, condition("Complete"))
  launcher.join(10)
  assert not launcher.is_alive()


def test_an_outage_longer_than_the_bound_fails_naming_the_trainjob_and_deletes_it(api):
  api.fail_always("watch", 500)
  job = manifest()
  name = job["metadata"]["name"]
  started = time.monotonic()
  with pytest.raises(KubernetesApiError) as failure:
    launch(api, job)
  took = time.monotonic() - started
  message = str(failure.value)
  assert message.startswith(f"Lost TrainJob {NAMESPACE}/{name}: the Kubernetes API is failing "
                            "for 1 s over ")
  assert "last HTTP 500 Internal Server Error: injected 500" in message
  assert message.endswith(f"TrainJob {NAMESPACE}/{name} is deleted (with its JobSet and node "
                          "pods).")
  assert [e[2] for e in api.events] == ["ADDED", "DELETED"]
  # Backoff, not a busy loop: 0.05, 0.1, 0.2, 0.2, ... s apart.
  assert FAST.outage_seconds - 0.3 < took < FAST.outage_seconds + 2
  assert api.count("watch") <= 12


def test_a_launcher_that_cannot_delete_after_giving_up_says_what_remains_and_how(api):
  api.fail_always("watch", 503)
  api.fail_always("delete", 503)
  job = manifest()
  name = job["metadata"]["name"]
  with pytest.raises(KubernetesApiError) as failure:
    launch(api, job)
  message = str(failure.value)
  assert f"Could not delete TrainJob {NAMESPACE}/{name}" in message
  assert message.endswith("If it exists, it and its JobSet and node pods are still there: "
                          f"delete them with `kubectl delete trainjobs.trainer.kubeflow.org "
                          f"{name} -n {NAMESPACE}`.")
  assert (trainjob.PLURAL, NAMESPACE, name) in api.objects


def test_a_refusal_that_will_not_pass_is_not_retried_and_names_the_trainjob(api):
  api.fail("create", 403)
  job = manifest()
  with pytest.raises(KubernetesApiError, match=f"Could not create TrainJob {NAMESPACE}/"
                     f"{job['metadata']['name']}: HTTP 403"):
    launch(api, job)
  assert api.count("create") == 1 and not api.objects


def test_the_node_pods_of_a_failed_trainjob_are_read_through_a_blip(api):
  job = manifest()
  name = job["metadata"]["name"]
  api.fail("pods", 500, kube_api.HANG)

  def fail():
    api.pods[NAMESPACE] = [node_pod(name, 1, 137, "OOMKilled")]
    api.set_status(trainjob.PLURAL, NAMESPACE, name, condition("Failed", "FailedJobs"))
  when_created(api, name, fail)
  with pytest.raises(TrainJobFailed, match="node 1 .* exited 137 \\(OOMKilled\\)"):
    launch(api, job)
  assert api.count("pods") == 3


# A launcher run as the step runs it, with short patience; the test sends it SIGTERM.
LAUNCHER = """
import json, logging, sys
from kubernetes import client as k8s
from kubeflow.trainjob_client import Patience, TrainJobClient, api_client, run_to_completion
logging.basicConfig(level=logging.INFO)
configuration = k8s.Configuration()
configuration.host = sys.argv[1]
patience = Patience(**json.loads(sys.argv[2]))
manifest = json.loads(sys.argv[3])
run_to_completion(TrainJobClient(api_client(configuration), "team-a", patience), manifest)
"""


def cancelled_launcher(api, job, started, patience=FAST):
  """Starts the launcher, sends SIGTERM once started() is true, returns (exit code, output)."""
  process = subprocess.Popen(
      [sys.executable, "-c", LAUNCHER, api.url, json.dumps(patience.__dict__), json.dumps(job)],
      cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)
  deadline = time.monotonic() + 60
  while not started():
    assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
    time.sleep(0.01)
  process.send_signal(signal.SIGTERM)
  return process.wait(timeout=60), process.stdout.read()


def test_a_cancel_whose_delete_fails_retries_it_and_leaves_no_trainjob(api):
  api.fail("delete", 500, kube_api.RESET)
  job = manifest()
  code, output = cancelled_launcher(api, job, lambda: api.count("watch") == 1)
  assert code == 128 + signal.SIGTERM, output
  assert [e[2] for e in api.events] == ["ADDED", "DELETED"], output
  assert api.count("delete") == 3
  assert f"TrainJob {NAMESPACE}/{job['metadata']['name']} is deleted" in output


def test_a_cancel_whose_delete_keeps_failing_says_what_remains_and_how_to_delete_it(api):
  api.fail_always("delete", 500)
  job = manifest()
  name = job["metadata"]["name"]
  code, output = cancelled_launcher(api, job, lambda: api.count("watch") == 1)
  assert code == 128 + signal.SIGTERM, output
  assert f"Could not delete TrainJob {NAMESPACE}/{name}: the Kubernetes API is failing" in output
  assert ("If it exists, it and its JobSet and node pods are still there: delete them with "
          f"`kubectl delete trainjobs.trainer.kubeflow.org {name} -n {NAMESPACE}`.") in output
  assert 2 <= api.count("delete") <= 12


@pytest.mark.parametrize("request_seconds", [kube_api.SLOW_SECONDS + 1,
                                             kube_api.SLOW_SECONDS / 2],
                         ids=["answered", "timed-out"])
def test_a_cancel_during_the_create_deletes_the_trainjob_it_makes(api, request_seconds):
  """The delete waits for the create in flight (deleted before it, the TrainJob would land
  after it and train on); a create that timed out may still land, and is deleted when it
  does."""
  api.fail("create", kube_api.SLOW)
  job = manifest()
  patience = Patience(**{**FAST.__dict__, "request_seconds": request_seconds,
                         "cancel_seconds": kube_api.SLOW_SECONDS + 1})
  code, output = cancelled_launcher(api, job, lambda: api.count("create") == 1, patience)
  assert code == 128 + signal.SIGTERM, output
  until(lambda: api.version >= 1, kube_api.SLOW_SECONDS + 5)  # The slow create has landed.
  until(lambda: not api.objects, 5)
  assert [e[2] for e in api.events] == ["ADDED", "DELETED"], output
