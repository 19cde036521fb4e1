"""Beam's own portable job server and an external SDK worker pool on 127.0.0.1, for tests.

They play the roles a Flink or Spark job server and its worker-pool sidecars play on a
cluster: `PortableBeam` starts `apache_beam.runners.portability.local_job_service_main` and
`apache_beam.runners.worker.worker_pool_main` on ephemeral ports, each in its own process,
waits until both listen, and stops them and their workers on exit (bounded in time). (The
pool listens on every interface: worker_pool_main takes a port only.)

The pool starts each SDK worker as its `--container_executable`, which Beam's SDK image runs
as `/opt/apache/beam/boot --worker_pool` with boot itself as the executable
(sdks/python/container/boot.go, main): boot asks the runner's provision service for the
pipeline options, installs the staged artifacts, then runs
`apache_beam.runners.worker.sdk_worker_main` with the options in PIPELINE_OPTIONS (which is
how `--beam_plugin`s reach a worker). There is no boot binary here, so `python -m
test_support.beam_servers boot ...` follows the same contract in this environment, which is the
pipeline's own (boot's `pip install` of the staged requirements would only confirm them, and
needs an index), and records, from inside each worker process, what it did:
`<record_dir>/worker-<pid>.jsonl`, one line when it starts (its pipeline options, the staged
artifacts it was offered, its parent process) and one per bundle descriptor it processes (its
transforms' names).
"""
from __future__ import annotations

import glob
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

from test_support.s3_server import free_port

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT_SECONDS = 60
STOP_TIMEOUT_SECONDS = 10
RECORD_DIR_VARIABLE = "BEAM_TEST_WORKER_RECORDS"
# A top-level transform of each Beam step of the pipeline (the first part of its transforms'
# names): a step ran in the pool when a worker's records name it.
BEAM_STEP_TRANSFORMS = {"ImageDatasetExampleGen": "WriteSplit[train]",
                        "StatisticsGen": "GenerateStatistics[train]",
                        "ValidationGate": "Inspect[train]",
                        "Transform": "Analyze",
                        "Evaluator": "ExtractEvaluateAndWriteResults"}


class PortableBeam:
  """A job server and a worker pool; use as a context manager. `env`: the pool's environment
  on top of this process's (what a worker-pool sidecar gets from its pod spec)."""

  def __init__(self, env: Optional[Dict[str, str]] = None):
    self._dir = tempfile.TemporaryDirectory(prefix="portable-beam-")
    self.record_dir = os.path.join(self._dir.name, "workers")
    os.makedirs(self.record_dir)
    # The project on the workers' path, as the image's WORKDIR is.
    path = os.pathsep.join([PROJECT_DIR] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    self._env = dict(os.environ, **(env or {}), PYTHONPATH=path,
                     **{RECORD_DIR_VARIABLE: self.record_dir})
    self._processes: List[subprocess.Popen] = []
    self.job_endpoint = ""
    self.worker_pool = ""
    self.pool_pid = 0

  def __enter__(self) -> "PortableBeam":
    try:
      self._start()
    except BaseException:
      self.stop()
      raise
    return self

  def __exit__(self, *exc_info) -> None:
    self.stop()
    self._dir.cleanup()

  def _start(self) -> None:
    port_file = os.path.join(self._dir.name, "job_server.port")
    job_server = self._spawn("job_server", [
        "-m", "apache_beam.runners.portability.local_job_service_main", "--port=0",
        f"--port_file={port_file}", f"--staging_dir={os.path.join(self._dir.name, 'staging')}"])
    boot = os.path.join(self._dir.name, "boot")
    with open(boot, "w") as f:  # The pool runs an executable file, as it would run Beam's boot.
      f.write(f"#!/bin/sh\nexec {sys.executable} -m test_support.beam_servers boot \"$@\"\n")
    os.chmod(boot, os.stat(boot).st_mode | stat.S_IEXEC)
    pool_port = free_port()  # The pool logs its port only below its log level.
    pool = self._spawn("worker_pool", [
        "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={pool_port}",
        f"--container_executable={boot}"])
    self.pool_pid = pool.pid
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline and not (self.job_endpoint and self.worker_pool):
      for name, process in (("job server", job_server), ("worker pool", pool)):
        if process.poll() is not None:
          raise RuntimeError(f"Beam's {name} exited with {process.returncode}: "
                             f"{self.log(name.replace(' ', '_'))[-2000:]}")
      if not self.job_endpoint and os.path.exists(port_file):
        with open(port_file) as f:
          self.job_endpoint = f"127.0.0.1:{f.read().strip()}"
      if not self.worker_pool and _listens(pool_port):
        self.worker_pool = f"127.0.0.1:{pool_port}"
      time.sleep(0.2)
    if not (self.job_endpoint and self.worker_pool):
      raise RuntimeError(f"Beam's job server or worker pool did not start within "
                         f"{START_TIMEOUT_SECONDS} s")

  def _spawn(self, name: str, args: List[str]) -> subprocess.Popen:
    with open(os.path.join(self._dir.name, f"{name}.log"), "wb") as log:
      process = subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT,
                                 env=self._env, start_new_session=True)
    self._processes.append(process)
    return process

  def log(self, name: str) -> str:
    path = os.path.join(self._dir.name, f"{name}.log")
    if not os.path.exists(path):
      return ""
    with open(path, errors="replace") as f:
      return f.read()

  def beam_flags(self) -> List[str]:
    """The pipeline's flags submitting every Beam step here."""
    return ["--beam_runner=portable", f"--beam_job_endpoint={self.job_endpoint}",
            "--beam_environment_type=EXTERNAL", f"--beam_environment_config={self.worker_pool}"]

  def worker_records(self) -> Dict[int, List[dict]]:
    """{worker pid: its records}, as the workers wrote them."""
    records = {}
    for path in glob.glob(os.path.join(self.record_dir, "worker-*.jsonl")):
      with open(path) as f:
        records[int(re.search(r"worker-(\d+)", path).group(1))] = [
            json.loads(line) for line in f if line.strip()]
    return records

  def steps_not_run_here(self) -> List[str]:
    """The pipeline's Beam steps no worker of the pool ran a transform of (every worker a child
    of the pool, none this process)."""
    workers = self.worker_records()
    assert workers, "no SDK worker started"
    ran = set()
    for pid, records in workers.items():
      assert records[0]["parent"] == self.pool_pid and pid != os.getpid()
      ran |= {name.split("/")[0] for record in records[1:] for name in record["transforms"]}
    return [step for step, transform in BEAM_STEP_TRANSFORMS.items() if transform not in ran]

  def stop(self) -> None:
    """Ends the servers and the workers they started (each in its server's process group)."""
    for process in self._processes:
      _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    for process in self._processes:
      try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        pass
      while _signal_group(process.pid, 0) and time.monotonic() < deadline:
        time.sleep(0.1)  # Its workers, which outlive it by a moment.
      _signal_group(process.pid, signal.SIGKILL)
      process.wait()
    self._processes = []


def _signal_group(pid: int, signum: int) -> bool:
  """Signals a server and the workers it started (its session's group, which outlives the
  server); False if none is left."""
  try:
    os.killpg(pid, signum)
    return True
  except ProcessLookupError:
    return False


def _listens(port: int) -> bool:
  with socket.socket() as sock:
    return sock.connect_ex(("127.0.0.1", port)) == 0


def _record(entry: dict) -> None:
  path = os.path.join(os.environ[RECORD_DIR_VARIABLE], f"worker-{os.getpid()}.jsonl")
  with open(path, "a") as f:
    f.write(json.dumps(entry) + "\n")


def _record_bundles() -> None:
  """Each bundle descriptor this worker processes, recorded once, before it runs."""
  from apache_beam.runners.worker import bundle_processor
  process_bundle = bundle_processor.BundleProcessor.process_bundle
  seen = set()

  def recorded(self, instruction_id):
    descriptor = self.process_bundle_descriptor
    if descriptor.id not in seen:
      seen.add(descriptor.id)
      _record({"bundle": descriptor.id,
               "transforms": sorted(t.unique_name for t in descriptor.transforms.values())})
    return process_bundle(self, instruction_id)

  bundle_processor.BundleProcessor.process_bundle = recorded


def boot(argv: List[str]) -> None:
  """An SDK worker as Beam's boot starts one (sdks/python/container/boot.go, main), minus
  the installation of staged artifacts."""
  import argparse

  import grpc
  from google.protobuf import json_format, text_format
  from apache_beam.portability.api import (beam_provision_api_pb2, beam_provision_api_pb2_grpc,
                                           endpoints_pb2)
  from apache_beam.runners.worker import sdk_worker_main
  parser = argparse.ArgumentParser()
  for name in ("id", "logging_endpoint", "artifact_endpoint", "provision_endpoint",
               "control_endpoint"):
    parser.add_argument(f"--{name}", required=True)
  parser.add_argument("--semi_persist_dir", default=tempfile.gettempdir())
  args = parser.parse_args(argv)
  with grpc.insecure_channel(args.provision_endpoint) as channel:
    info = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel).GetProvisionInfo(
        beam_provision_api_pb2.GetProvisionInfoRequest(),
        metadata=[("worker_id", args.id)]).info
  options = json_format.MessageToJson(info.pipeline_options)
  _record({"worker_id": args.id, "parent": os.getppid(), "options": _load_options(options),
           "staged": sorted(_staged_name(a) for a in info.dependencies)})

  def descriptor(url: str) -> str:
    return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

  os.environ.update({
      "WORKER_ID": args.id, "PIPELINE_OPTIONS": options,
      "SEMI_PERSISTENT_DIRECTORY": args.semi_persist_dir,
      "LOGGING_API_SERVICE_DESCRIPTOR": descriptor(args.logging_endpoint),
      "CONTROL_API_SERVICE_DESCRIPTOR": descriptor(args.control_endpoint)})
  if info.HasField("status_endpoint"):
    os.environ["STATUS_API_SERVICE_DESCRIPTOR"] = text_format.MessageToString(
        info.status_endpoint)
  _record_bundles()
  sdk_worker_main.main([])


def _load_options(options_json: str) -> dict:
  from apache_beam.runners.worker import sdk_worker_main
  return sdk_worker_main._load_pipeline_options(options_json)  # pylint: disable=protected-access


def _staged_name(artifact) -> str:
  from apache_beam.portability.api import beam_runner_api_pb2
  payload = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(artifact.role_payload)
  return payload.staged_name


if __name__ == "__main__" and sys.argv[1:2] == ["boot"]:
  boot(sys.argv[2:])
