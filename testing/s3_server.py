"""A real S3-protocol server (moto in server mode) on 127.0.0.1 for tests, bounded in time.

`S3Server` starts `python -m moto.server` on a free port in its own process, waits until it
answers, and kills it on exit; `environ()` is what a pod would get from a Kubernetes secret
(the standard AWS variables plus the endpoint), so code under test configures itself exactly
as it does in a cluster. The `s3_server` fixture below shares one per session.
"""
from __future__ import annotations

import atexit
import os
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
_session_status = {}


@pytest.fixture(scope="session")
def s3_server():
  """One moto S3 server for the session; each test makes its own bucket."""
  with S3Server() as server:
    yield server


@pytest.fixture
def s3(s3_server, request, monkeypatch):
  """A fresh bucket for the test, as (s3://bucket, bucket); this process configured from the
  server's environment, as a pod is."""
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


def pytest_sessionfinish(session, exitstatus):
  _session_status["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  """After a test used TensorFlow's S3 filesystem in-process, pytest would abort at exit
  (storage.object_storage.end_process says why): it ends with its own status instead."""
  if "tensorflow_io" in sys.modules:
    from storage import object_storage
    object_storage.end_process(_session_status.get("status", 1))
