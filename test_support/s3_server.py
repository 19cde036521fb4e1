"""A real S3-protocol server (moto in server mode) on 127.0.0.1 for tests, bounded in time.

`S3Server` starts `python -m moto.server` on a free port in its own process, waits until it
answers, and kills it on exit; `environ()` is what a pod would get from a Kubernetes secret
(the standard AWS variables plus the endpoint), so code under test configures itself exactly
as it does in a cluster. The `s3_server` fixture below shares one per session, started when
first used.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Dict, Optional

import pytest

START_TIMEOUT_SECONDS = 60
STOP_TIMEOUT_SECONDS = 10
# moto accepts any credentials; these only have to be present and signed with.
ACCESS_KEY_ID = "test-access-key"
SECRET_ACCESS_KEY = "test-secret-key"
REGION = "us-east-1"


def free_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


class S3Server:
  """moto's S3 server in a subprocess; use as a context manager."""

  def __init__(self, port: Optional[int] = None, tls: bool = False):
    """tls: HTTPS with a certificate of a private CA made for this server (self.ca_bundle)."""
    self.port = port or free_port()
    self.tls = tls
    self.endpoint_url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
    self._process: Optional[subprocess.Popen] = None
    self._log = None
    self._tls_dir = tempfile.TemporaryDirectory() if tls else None
    self.ca_bundle = os.path.join(self._tls_dir.name, "ca.pem") if tls else None

  def environ(self) -> Dict[str, str]:
    """The variables a pod reads its object-storage settings from (docs/kubeflow.md,
    "Object storage")."""
    environ = {"AWS_ENDPOINT_URL_S3": self.endpoint_url, "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
               "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY, "AWS_REGION": REGION}
    return {**environ, "AWS_CA_BUNDLE": self.ca_bundle} if self.tls else environ

  def start(self) -> "S3Server":
    self._log = tempfile.TemporaryFile()
    tls_args = []
    if self.tls:
      key_path = os.path.join(self._tls_dir.name, "key.pem")
      _write_self_signed_certificate(self.ca_bundle, key_path)
      tls_args = ["--ssl-cert", self.ca_bundle, "--ssl-key", key_path]
    # Also stopped by the exit functions, which end_process runs even where __exit__ is skipped.
    atexit.register(self.stop)
    self._process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "--host", "127.0.0.1", "--port", str(self.port)]
        + tls_args,
        stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "MOTO_PORT": str(self.port)})
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
      if self._process.poll() is not None:
        raise RuntimeError(f"moto server exited with {self._process.returncode}: {self.output()}")
      try:  # moto's own health endpoint; any HTTP answer means the server is up.
        context = ssl.create_default_context(cafile=self.ca_bundle) if self.tls else None
        with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=2,
                                    context=context):
          return self
      except urllib.error.HTTPError:
        return self
      except OSError:
        time.sleep(0.2)
    self.stop()
    raise TimeoutError(f"moto server on {self.endpoint_url} did not answer within "
                       f"{START_TIMEOUT_SECONDS} s: {self.output()}")

  def stop(self) -> None:
    if self._process is not None and self._process.poll() is None:
      self._process.terminate()
      try:
        self._process.wait(STOP_TIMEOUT_SECONDS)
      except subprocess.TimeoutExpired:
        self._process.kill()
        self._process.wait()
    if self._log is not None:
      self._log.close()
      self._log = None
    if self._tls_dir is not None:
      self._tls_dir.cleanup()

  def output(self) -> str:
    if self._log is None:
      return ""
    self._log.seek(0)
    return self._log.read().decode(errors="replace")[-2000:]

  def client(self):
    """A boto3 S3 client on this server, for creating buckets and inspecting raw keys."""
    import boto3
    return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=REGION,
                        verify=self.ca_bundle if self.tls else None,
                        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY)

  def create_bucket(self, name: str) -> str:
    self.client().create_bucket(Bucket=name)
    return f"s3://{name}"

  def keys(self, bucket: str, prefix: str = "") -> list:
    """Every object key under the prefix, with its size: [(key, size), ...]."""
    pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted((item["Key"], item["Size"]) for page in pages
                  for item in page.get("Contents", []))

  def __enter__(self) -> "S3Server":
    return self.start()

  def __exit__(self, *exc) -> None:
    self.stop()



def _write_self_signed_certificate(cert_path: str, key_path: str) -> None:
  """A CA certificate for 127.0.0.1 that is also the server's: the whole private chain."""
  import datetime
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import NameOID
  import ipaddress
  key = ec.generate_private_key(ec.SECP256R1())
  name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
  now = datetime.datetime.now(datetime.timezone.utc)
  certificate = (
      x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
      .serial_number(x509.random_serial_number())
      .not_valid_before(now - datetime.timedelta(minutes=5))
      .not_valid_after(now + datetime.timedelta(days=1))
      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
      .add_extension(x509.SubjectAlternativeName(
          [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
      .sign(key, hashes.SHA256()))
  with open(cert_path, "wb") as f:
    f.write(certificate.public_bytes(serialization.Encoding.PEM))
  with open(key_path, "wb") as f:
    f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


# pytest hooks and fixtures; a conftest.py imports them by name to use them.
#
# tensorflow-io's S3 filesystem aborts at exit the process that used it
# (storage.object_storage.end_process says why). So the tests that use s3:// in-process (the
# `s3` fixture) run in a pytest process of their own: one per session for all the s3 tests it
# selected (-k, -m, node ids), of every file, started when the session reaches its first s3 test
# and ended with its own status. Under pytest-xdist each worker collects every test but runs
# whole files; the first worker to reach an s3 test runs that process on its moto server while
# holding a lock in a directory the controller gives every worker, and leaves the reports there;
# a worker reaching an s3 test later waits for the lock and reads them, starting no process and
# no server. The session's processes never use s3:// through TensorFlow (importing
# tensorflow-io, as TFMA does, is harmless) and end as Python does, so a crash at exit fails
# them.
S3_TESTS_PROCESS_TIMEOUT_SECONDS = 1800
# A worker waits this long for another worker's s3 tests' process (its server's start included).
S3_TESTS_WAIT_SECONDS = S3_TESTS_PROCESS_TIMEOUT_SECONDS + 2 * START_TIMEOUT_SECONDS
_SERVER_PORT_VARIABLE = "S3_TESTS_SERVER_PORT"  # Set in that process: the session's server.
_REPORTS_VARIABLE = "S3_TESTS_REPORTS"  # Set in that process: where it writes its reports.
_SHARED_DIRECTORY_KEY = "s3_tests_directory"  # In each pytest-xdist worker's workerinput.
_RESULT_FILE = "result.json"  # In that directory: the process's reports, status and output.
_LOCK_FILE = "lock"
_session = {}


def _in_s3_tests_process() -> bool:
  return _REPORTS_VARIABLE in os.environ


class _StartedOnFirstUse:
  """An S3Server started when first used: a pytest-xdist worker whose s3 tests' reports come
  from another worker's process, and that runs no other test using the server, starts none."""

  def __init__(self):
    self._server: Optional[S3Server] = None
    self._error: Optional[Exception] = None  # Why it did not start, raised at every use.

  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    if self._error is not None:
      raise self._error
    if self._server is None:
      try:
        self._server = S3Server().start()
      except Exception as error:
        self._error = error
        raise
    return getattr(self._server, name)

  def stop(self) -> None:
    if self._server is not None:
      self._server.stop()


@pytest.fixture(scope="session")
def s3_server():
  """One moto S3 server for the session (and its s3 tests' process, if this process starts
  that), started when first used; each test makes its own bucket."""
  if _in_s3_tests_process():
    yield S3Server(port=int(os.environ[_SERVER_PORT_VARIABLE]))  # The session's, running.
    return
  server = _StartedOnFirstUse()
  _session["server"] = server
  try:
    yield server
  finally:
    server.stop()


@pytest.fixture
def s3(s3_server, request, monkeypatch):
  """A fresh bucket for the test, as (s3://bucket, bucket); the test's process configured from
  the server's environment, as a pod is. The test itself runs in the s3 tests' process."""
  if not _in_s3_tests_process():
    return None  # pytest_pyfunc_call runs the test there.
  from storage import object_storage
  some_settings = object_storage.S3Settings("http://127.0.0.1:1", "us-east-1", ca_bundle="ca.pem")
  for name in some_settings.environ():
    monkeypatch.delenv(name, raising=False)
  environ = s3_server.environ()  # With every client's names, so all are restored after.
  environ.update(object_storage.S3Settings.from_environ(environ).environ())
  for name, value in environ.items():
    monkeypatch.setenv(name, value)
  object_storage.configure()
  bucket = request.node.name.split("[")[0].replace("_", "-")[:50].strip("-")
  return s3_server.create_bucket(bucket), bucket


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
  """In the session's processes, a test using `s3` takes its outcome from the session's s3
  tests' process (started for all of them at the first)."""
  if _in_s3_tests_process() or "s3" not in pyfuncitem.fixturenames:
    return None
  if "result" not in _session:
    selected = [item.nodeid for item in pyfuncitem.session.items  # Those selected (-k, -m).
                if "s3" in item.fixturenames]
    _session["result"] = _shared_result(
        pyfuncitem.config, lambda: _run_s3_tests(pyfuncitem.config, selected))
  result = _session["result"]
  report = result["reports"].get(pyfuncitem.nodeid)
  if report is None:
    pytest.fail(f"The s3 tests' process ({result['end']}) reported nothing for this test:"
                f"\n{result['output']}", pytrace=False)
  if report["outcome"] == "skipped":
    pytest.skip(report["text"])
  if report["outcome"] == "failed":
    pytest.fail(f"In the s3 tests' process:\n{report['text']}", pytrace=False)
  return True


def _shared_result(config, run):
  """run()'s result, made once per session. Under pytest-xdist the first worker to ask runs it
  holding the lock (released when its file closes, also if the worker dies) and leaves it in
  the shared directory; a worker asking later waits for the lock (S3_TESTS_WAIT_SECONDS at
  most) and reads it, or runs it if the holder died first."""
  directory = getattr(config, "workerinput", {}).get(_SHARED_DIRECTORY_KEY)
  if directory is None:  # One process; or workers given no directory, each running its own.
    return run()
  result_path = os.path.join(directory, _RESULT_FILE)
  with open(os.path.join(directory, _LOCK_FILE), "w") as lock:
    deadline = time.monotonic() + S3_TESTS_WAIT_SECONDS
    while True:
      try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
      except BlockingIOError:
        if time.monotonic() > deadline:
          return {"reports": {}, "output": "",
                  "end": f"run by another worker, not ended after {S3_TESTS_WAIT_SECONDS} s"}
        time.sleep(0.2)
    if os.path.exists(result_path):
      with open(result_path) as f:
        return json.load(f)
    result = run()
    with open(result_path + ".partial", "w") as f:
      json.dump(result, f)
    os.replace(result_path + ".partial", result_path)
    return result


def _run_s3_tests(config, node_ids):
  """Runs the tests in one pytest process on the session's server: {"reports": {node id:
  report}, "end": how the process ended, "output": the end of its output}."""
  try:
    port = _session["server"].port  # Starts it.
  except Exception as error:  # pylint: disable=broad-except  Every s3 test fails with it.
    return {"reports": {}, "end": "not started", "output": f"{type(error).__name__}: {error}"}
  with tempfile.TemporaryDirectory() as directory:
    reports_path = os.path.join(directory, "reports.jsonl")
    try:
      process = subprocess.run(
          [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *node_ids],
          cwd=str(config.rootpath), capture_output=True, text=True,
          timeout=S3_TESTS_PROCESS_TIMEOUT_SECONDS,
          env={**os.environ, _SERVER_PORT_VARIABLE: str(port), _REPORTS_VARIABLE: reports_path})
      end = f"exit status {process.returncode}"
      output = process.stdout + process.stderr
    except subprocess.TimeoutExpired as timeout:
      end = f"killed after {S3_TESTS_PROCESS_TIMEOUT_SECONDS} s"
      output = "".join(text.decode(errors="replace") if isinstance(text, bytes) else text
                       for text in (timeout.stdout, timeout.stderr) if text)
    reports = {}
    if os.path.exists(reports_path):
      with open(reports_path) as f:
        for line in f:
          report = json.loads(line)
          if report["outcome"] != "passed" or report["node_id"] not in reports:
            reports[report["node_id"]] = report  # Its first failing phase, or its call.
  return {"reports": reports, "end": end, "output": output[-3000:]}


def pytest_runtest_logreport(report):
  """In the s3 tests' process: each phase's outcome, for the session's processes."""
  if not _in_s3_tests_process() or (report.when != "call" and report.passed):
    return
  if report.skipped:
    text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
  else:
    text = report.longreprtext
  with open(os.environ[_REPORTS_VARIABLE], "a") as f:
    f.write(json.dumps({"node_id": report.nodeid, "outcome": report.outcome,
                        "text": text}) + "\n")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
  """pytest-xdist's controller: one directory for all its workers' s3 tests (removed at its
  end)."""
  if "shared_directory" not in _session:
    _session["shared_directory"] = tempfile.mkdtemp(prefix="s3-tests-")
  node.workerinput[_SHARED_DIRECTORY_KEY] = _session["shared_directory"]


def pytest_sessionfinish(session, exitstatus):
  _session["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  """The s3 tests' process ends with its own status, not tensorflow-io's abort."""
  if "shared_directory" in _session:
    shutil.rmtree(_session.pop("shared_directory"), ignore_errors=True)
  if _in_s3_tests_process():
    from storage import object_storage
    object_storage.end_process(_session.get("status", 1))
