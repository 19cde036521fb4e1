"""A real S3-protocol server (moto in server mode) on 127.0.0.1 for tests, bounded in time.

`S3Server` starts `python -m moto.server` on a free port in its own process, waits until it
answers, and kills it on exit; `environ()` is what a pod would get from a Kubernetes secret
(the standard AWS variables plus the endpoint), so code under test configures itself exactly
as it does in a cluster. The `s3_server` fixture below shares one per session.
"""
from __future__ import annotations

import os
import socket
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

  def __init__(self, port: Optional[int] = None):
    self.port = port or free_port()
    self.endpoint_url = f"http://127.0.0.1:{self.port}"
    self._process: Optional[subprocess.Popen] = None
    self._log = None

  def environ(self) -> Dict[str, str]:
    """The variables a pod reads its object-storage settings from (README, "Object storage")."""
    return {"AWS_ENDPOINT_URL_S3": self.endpoint_url, "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY, "AWS_REGION": REGION}

  def start(self) -> "S3Server":
    self._log = tempfile.TemporaryFile()
    self._process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "--host", "127.0.0.1", "--port", str(self.port)],
        stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "MOTO_PORT": str(self.port)})
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
      if self._process.poll() is not None:
        raise RuntimeError(f"moto server exited with {self._process.returncode}: {self.output()}")
      try:  # moto's own health endpoint; any HTTP answer means the server is up.
        with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=2):
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

  def output(self) -> str:
    if self._log is None:
      return ""
    self._log.seek(0)
    return self._log.read().decode(errors="replace")[-2000:]

  def client(self):
    """A boto3 S3 client on this server, for creating buckets and inspecting raw keys."""
    import boto3
    return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=REGION,
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



# pytest hooks and fixtures; a conftest.py imports them by name to use them.
_session_status = {}


@pytest.fixture(scope="session")
def s3_server():
  """One moto S3 server for the session; each test makes its own bucket."""
  with S3Server() as server:
    yield server


def pytest_sessionfinish(session, exitstatus):
  _session_status["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  """After a test used TensorFlow's S3 filesystem in-process, pytest would abort at exit
  (kubeflow.object_storage.end_process says why): it ends with its own status instead."""
  if "tensorflow_io" in sys.modules:
    from kubeflow import object_storage
    object_storage.end_process(_session_status.get("status", 1))
