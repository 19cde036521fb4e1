"""Creates a TrainJob through the Kubernetes API (or re-attaches to a retried launcher's), waits
for it to end, and deletes it when the step is cancelled or gives up (docs/kubeflow.md, "Several
Trainer nodes"). Every call has a timeout, transient failures are retried with backoff for a
bounded time, and every error names the TrainJob.
"""
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Callable, List, Optional, Tuple

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from kubeflow import trainjob

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
COMPLETE, FAILED = "Complete", "Failed"
# Statuses a request may get from a busy or restarting API server (or the proxy before it):
# worth trying again. Anything else (403 Forbidden, 422 Invalid, ...) will not change.
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)


@dataclasses.dataclass(frozen=True)
class Patience:
  """How long the launcher waits for the API server, and how it rides out its failures."""
  request_seconds: float = 30.0  # Every call's connect and read timeout.
  # One watch, which the server ends; a silent connection is dropped after this plus
  # request_seconds, and watched again.
  watch_seconds: int = 60
  first_retry_seconds: float = 1.0  # The wait after a first failure, doubled after each one...
  longest_retry_seconds: float = 30.0  # ...up to this.
  outage_seconds: float = 900.0  # Failing this long with no success ends the step.
  # A cancelled launcher pod is killed terminationGracePeriodSeconds (30 s by default) after
  # its SIGTERM: the deletion is retried within that.
  cancel_seconds: float = 20.0
  watch_interval_seconds: float = 1.0  # At least this between two watches: never busy.
  gone_seconds: float = 300.0  # For a failed TrainJob's pods to go before it is made again.


class TrainJobError(RuntimeError):
  """The step cannot get its model from the TrainJob; the message names it."""


class TrainJobFailed(TrainJobError):
  """The TrainJob ended Failed."""


class TrainJobGone(TrainJobError):
  """The TrainJob was deleted before it ended."""


class KubernetesApiError(TrainJobError):
  """The API server refused a call, or kept failing for longer than Patience allows."""


class _Cancelled(Exception):
  """The step was cancelled while a call waited for its turn."""


def api_client(configuration: Optional[k8s.Configuration] = None) -> k8s.ApiClient:
  """A client of `configuration`, else of this pod's cluster (its service account), else of the
  kubeconfig's current context. urllib3's own immediate retries are off: TrainJobClient retries
  with backoff and counts the time."""
  if configuration is None:
    configuration = k8s.Configuration()
    try:
      k8s_config.load_incluster_config(client_configuration=configuration)
    except k8s_config.ConfigException:
      k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"),
                                  client_configuration=configuration)
  configuration.retries = False
  return k8s.ApiClient(configuration)


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


# A connection reset, refused or timed out, or a response cut short: worth trying again.
TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)


def _describe(error: BaseException) -> str:
  """An error in one line: an API answer's status and its Status message."""
  if not isinstance(error, k8s.ApiException):
    return f"{type(error).__name__}: {error}"
  body = error.body.decode("utf-8", "replace") if isinstance(error.body, bytes) else error.body
  try:
    said = json.loads(body or "").get("message", "")
  except (ValueError, AttributeError):  # Not a Status (a proxy's page, say): its start.
    said = (body or "").strip()[:200]
  return f"HTTP {error.status} {error.reason}" + (f": {said}" if said else "")


class _Retries:
  """Backoff over one stretch of failures: exponential waits, and an end `limit` seconds after
  the stretch's first failure. A success starts the next stretch afresh."""

  def __init__(self, patience: Patience, limit: float, stopping: threading.Event,
               subject: str):
    self.patience, self.limit, self.stopping, self.subject = patience, limit, stopping, subject
    self.first_failure: Optional[float] = None
    self.attempts = 0

  def succeeded(self) -> None:
    self.first_failure, self.attempts = None, 0

  def failed(self, error: BaseException) -> Optional[str]:
    """Waits before the next attempt; or, past the limit, returns what to tell the user."""
    now = time.monotonic()
    self.first_failure = now if self.first_failure is None else self.first_failure
    self.attempts += 1
    delay = min(self.patience.first_retry_seconds * 2 ** (self.attempts - 1),
                self.patience.longest_retry_seconds)
    retry_after = getattr(error, "headers", None) and error.headers.get("Retry-After")
    if retry_after and retry_after.isdigit():  # What a 429 asks for, within our bound.
      delay = min(max(delay, float(retry_after)), self.patience.longest_retry_seconds)
    spent = now - self.first_failure
    if spent + delay > self.limit:
      return (f"failing for {spent:.0f} s over {self.attempts} attempt(s), last "
              f"{_describe(error)}")
    log.warning("%s: %s; trying again in %.2f s.", self.subject, _describe(error), delay)
    if self.stopping.wait(delay):
      raise _Cancelled()
    return None


class TrainJobClient:
  """One namespace's TrainJobs, through calls that time out and retry what may pass."""

  def __init__(self, api: k8s.ApiClient, namespace: str, patience: Patience = Patience()):
    self.namespace = namespace
    self.patience = patience
    self.custom = k8s.CustomObjectsApi(api)
    self.core = k8s.CoreV1Api(api)
    self.stopping = threading.Event()  # Set by a cancel: no new create, no more waiting.
    self._create_lock = threading.Lock()  # Held by one create attempt; a cancel waits for it.
    # A create went unanswered (timed out, reset): the server may carry it out later.
    self._create_in_doubt = False

  def _ref(self, name: str) -> str:
    return f"TrainJob {self.namespace}/{name}"

  def _timeout(self, read_seconds: Optional[float] = None, limit: Optional[float] = None):
    """(connect, read) timeouts of one call: the request's, or a quarter of a `limit` on all
    the call's attempts when that is shorter."""
    if read_seconds is None:
      read_seconds = self.patience.request_seconds
    if limit is not None:
      read_seconds = min(read_seconds, limit / 4)
    return (min(self.patience.request_seconds, read_seconds), read_seconds)

  def _call(self, name: str, what: str, call: Callable, limit: Optional[float] = None,
            interruptible: bool = True):
    """call(), retried on transient failures for up to `limit` seconds (outage_seconds), the
    waits cut short by a cancel when `interruptible`; a lasting or permanent failure is a
    KubernetesApiError naming the TrainJob. 404 and 409 answers are the caller's to read
    (k8s.ApiException)."""
    retries = _Retries(self.patience, self.patience.outage_seconds if limit is None else limit,
                       self.stopping if interruptible else threading.Event(),
                       f"{what} {self._ref(name)}")
    while True:
      try:
        return call()
      except k8s.ApiException as error:
        if error.status in (404, 409):
          raise
        if error.status not in TRANSIENT_STATUSES:
          raise KubernetesApiError(f"Could not {what} {self._ref(name)}: "
                                   f"{_describe(error)}") from error
        given_up = retries.failed(error)
      except TRANSPORT_ERRORS as error:
        given_up = retries.failed(error)
      if given_up:
        raise KubernetesApiError(f"Could not {what} {self._ref(name)}: the Kubernetes API is "
                                 f"{given_up}.")

  def create_or_attach(self, manifest: dict) -> dict:
    """Creates the TrainJob; one of that name already there (a restarted launcher's, or this
    one's whose answer was lost) is kept, unless it failed: a retried step then gets a new one,
    which resumes from the checkpoints."""
    name = manifest["metadata"]["name"]
    for _ in range(3):
      try:
        created = self._call(name, "create", lambda: self._create_once(manifest))
        log.info("Created %s (%d nodes).", self._ref(name),
                 manifest["spec"]["trainer"]["numNodes"])
        return created
      except k8s.ApiException as error:
        if error.status != 409:
          raise KubernetesApiError(f"Could not create {self._ref(name)}: "
                                   f"{_describe(error)}") from error
      try:
        existing = self.get(name)
      except k8s.ApiException as error:  # 404: deleted since; create it again.
        if error.status != 404:
          raise
        continue
      if FAILED not in _true_conditions(existing):
        log.info("%s exists (an earlier attempt of this step): waiting for it.", self._ref(name))
        return existing
      log.warning("%s of an earlier attempt failed: replacing it.", self._ref(name))
      self.delete(name)
      self._wait_gone(name)
    raise KubernetesApiError(f"{self._ref(name)} could not be created: it kept appearing and "
                             "disappearing.")

  def _create_once(self, manifest: dict) -> dict:
    with self._create_lock:
      if self.stopping.is_set():
        raise _Cancelled()
      try:
        created = self.custom.create_namespaced_custom_object(
            trainjob.GROUP, trainjob.VERSION, self.namespace, trainjob.PLURAL, manifest,
            _request_timeout=self._timeout())
      except TRANSPORT_ERRORS:
        self._create_in_doubt = True
        raise
      self._create_in_doubt = False
      return created

  def _wait_gone(self, name: str) -> None:
    deadline = time.monotonic() + self.patience.gone_seconds
    while time.monotonic() < deadline:
      try:
        self.get(name)
      except k8s.ApiException as error:
        if error.status == 404:
          return
        raise
      if self.stopping.wait(self.patience.watch_interval_seconds):
        raise _Cancelled()
    raise KubernetesApiError(f"{self._ref(name)} was not deleted within "
                             f"{self.patience.gone_seconds:.0f} s.")

  def get(self, name: str, limit: Optional[float] = None) -> dict:
    """The TrainJob (k8s.ApiException 404 when there is none). With `limit`, retried for that
    long, even once the step is cancelled."""
    return self._call(name, "read", lambda: self.custom.get_namespaced_custom_object(
        trainjob.GROUP, trainjob.VERSION, self.namespace, trainjob.PLURAL, name,
        _request_timeout=self._timeout(limit=limit)), limit, interruptible=limit is None)

  def delete(self, name: str, limit: Optional[float] = None) -> None:
    """Deletes the TrainJob and, in the foreground, its JobSet and pods; gone already is fine.
    With `limit`, retried for that long, even once the step is cancelled."""
    try:
      self._call(name, "delete", lambda: self.custom.delete_namespaced_custom_object(
          trainjob.GROUP, trainjob.VERSION, self.namespace, trainjob.PLURAL, name,
          body=k8s.V1DeleteOptions(propagation_policy="Foreground"),
          _request_timeout=self._timeout(limit=limit)), limit, interruptible=limit is None)
      log.info("Deleted %s.", self._ref(name))
    except k8s.ApiException as error:
      if error.status != 404:
        raise

  def delete_leaving_nothing(self, name: str) -> Tuple[bool, str]:
    """Deletes the TrainJob within cancel_seconds, after any create in flight, and again if an
    unanswered create lands meanwhile: whether it is gone, and what became of it in words for
    the log and the step's error."""
    self.stopping.set()
    with self._create_lock:  # A create under way lands before the delete, not after.
      pass
    deadline = time.monotonic() + self.patience.cancel_seconds
    try:
      self.delete(name, self.patience.cancel_seconds)
      while self._create_in_doubt and time.monotonic() < deadline:
        time.sleep(self.patience.watch_interval_seconds)
        left = max(deadline - time.monotonic(), self.patience.watch_interval_seconds)
        try:
          self.get(name, left)
        except k8s.ApiException:  # 404: not there (yet).
          continue
        self.delete(name, left)
      return True, f"{self._ref(name)} is deleted (with its JobSet and node pods)."
    except KubernetesApiError as error:
      return False, (f"{error} If it exists, it and its JobSet and node pods are still there: "
                     f"delete them with `kubectl delete trainjobs.{trainjob.GROUP} {name} -n "
                     f"{self.namespace}`.")

  def wait(self, name: str) -> dict:
    """Returns the TrainJob once Complete; raises TrainJobFailed naming the failed nodes, or
    TrainJobGone if it is deleted first. Watches from the last resourceVersion seen, again
    whenever a watch ends or fails, reading the TrainJob afresh when that version is too old."""
    job = self._read_existing(name)
    if self._ended(job):
      return job
    version = job["metadata"].get("resourceVersion")
    retries = _Retries(self.patience, self.patience.outage_seconds, self.stopping,
                       f"watch {self._ref(name)}")
    last_watch = -float("inf")
    while True:
      pause = last_watch + self.patience.watch_interval_seconds - time.monotonic()
      if pause > 0 and self.stopping.wait(pause):
        raise _Cancelled()
      last_watch = time.monotonic()
      try:
        for event in self._watch(name, version):
          retries.succeeded()
          obj = event["raw_object"]
          version = obj.get("metadata", {}).get("resourceVersion", version)
          if event["type"] == "DELETED":
            raise TrainJobGone(f"{self._ref(name)} was deleted before it ended: the Trainer "
                               "step has no model.")
          if event["type"] in ("ADDED", "MODIFIED") and self._ended(obj):
            return obj
        retries.succeeded()  # The server ended the watch: watch again from `version`.
        continue
      except k8s.ApiException as error:
        if error.status == 410:  # Expired: read the TrainJob afresh and watch from there.
          job = self._read_existing(name)
          if self._ended(job):
            return job
          version = job["metadata"].get("resourceVersion")
          continue
        if error.status not in TRANSIENT_STATUSES:
          raise KubernetesApiError(f"Could not watch {self._ref(name)}: "
                                   f"{_describe(error)}") from error
        given_up = retries.failed(error)
      except TRANSPORT_ERRORS as error:
        given_up = retries.failed(error)
      if given_up:
        raise KubernetesApiError(f"Lost {self._ref(name)}: the Kubernetes API is {given_up}.")

  def _watch(self, name: str, version: Optional[str]):
    return k8s_watch.Watch().stream(
        self.custom.list_namespaced_custom_object, trainjob.GROUP, trainjob.VERSION,
        self.namespace, trainjob.PLURAL, field_selector=f"metadata.name={name}",
        resource_version=version, timeout_seconds=self.patience.watch_seconds,
        allow_watch_bookmarks=True,  # Keeps `version` recent while the TrainJob is unchanged.
        _request_timeout=self._timeout(self.patience.watch_seconds
                                       + self.patience.request_seconds))

  def _read_existing(self, name: str) -> dict:
    try:
      return self.get(name)
    except k8s.ApiException as error:
      if error.status == 404:
        raise TrainJobGone(f"{self._ref(name)} was deleted before it ended (the API server "
                           "has no such TrainJob): the Trainer step has no model.") from error
      raise

  def _ended(self, job: dict) -> bool:
    conditions = _true_conditions(job)
    if FAILED in conditions:
      condition = conditions[FAILED]
      raise TrainJobFailed(
          f"{self._ref(job['metadata']['name'])} failed "
          f"({condition.get('reason', '')}: {condition.get('message', '')}). "
          + "; ".join(self.failed_nodes(job["metadata"]["name"])))
    return COMPLETE in conditions

  def failed_nodes(self, name: str) -> List[str]:
    """Why each failed node's pod stopped, by completion index."""
    pods = self._call(name, "list the node pods of", lambda: self.core.list_namespaced_pod(
        self.namespace, label_selector=f"{trainjob.JOBSET_NAME_LABEL}={name}",
        _request_timeout=self._timeout())).items
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
  """Creates (or attaches to) the TrainJob and waits for it. SIGTERM (a cancelled run stops
  the launcher pod) deletes it and ends the process with 128 + the signal; a launcher that
  gives up (the API failing too long, or refusing a call) deletes it before failing too, so no
  TrainJob trains on with no step to take its model. A Failed one stays for its logs (a retried
  step replaces it)."""
  name = manifest["metadata"]["name"]
  cancelled = threading.Event()

  def delete_and_exit(code: int) -> None:
    log.warning("Cancelled: deleting TrainJob %s/%s.", job_client.namespace, name)
    try:
      deleted, outcome = job_client.delete_leaving_nothing(name)
      (log.info if deleted else log.error)(outcome)
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
  except (TrainJobFailed, TrainJobGone, _Cancelled):
    raise
  except Exception as error:  # pylint: disable=broad-except
    if cancelled.is_set():
      raise
    deleted, outcome = job_client.delete_leaving_nothing(name)
    if isinstance(error, TrainJobError):
      raise type(error)(f"{error} {outcome}") from error
    log.log(logging.INFO if deleted else logging.ERROR, outcome)
    raise
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
  except TrainJobError as error:
    print(error, file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  main()
