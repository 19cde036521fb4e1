"""The engine of the pipeline's Beam steps (ExampleGen, StatisticsGen, the validation gate,
Transform, EvaluationSetGen, the Evaluator), for a local run and a Kubeflow run alike.

direct: Beam's DirectRunner in the step's own process (PipelineConfig picks its running mode).
portable: Beam's PortableRunner submits each step over the Job API to a job server (Flink,
Spark, or Beam's own), whose SDK harnesses run this project's code: the pipeline image
(DOCKER), a worker pool at host:port (EXTERNAL) or a boot command (PROCESS).
dataflow: Google Cloud Dataflow, the pipeline image as SDK container; a Kubeflow run only
(pipeline/cluster_config.py holds its settings).
docs/kubeflow.md, "Beam engines", says what each one needs, as tested.
"""
from __future__ import annotations

import json
import re
import socket
from typing import TYPE_CHECKING

from trainer_module.config import require

if TYPE_CHECKING:  # pipeline.config imports this module.
  from pipeline.config import PipelineConfig

BEAM_RUNNERS = ("direct", "dataflow", "portable")
BEAM_ENVIRONMENT_TYPES = ("DOCKER", "EXTERNAL", "PROCESS")
# Beam's SDK harness boot program: the TFX image copies it from Beam's SDK image and makes it
# the ENTRYPOINT (tfx/tools/docker/Dockerfile, v1.16.0), so the pipeline image is a Beam worker.
BEAM_BOOT = "/opt/apache/beam/boot"
HOST_PORT = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*:[0-9]{1,5}")
# Staging --requirements_file makes the submitting step `pip download` every listed package
# first (apache_beam/runners/portability/stager.py, Stager.create_job_resources) unless the
# cache is skipped; the harnesses have them installed already (the image, the worker's venv).
SKIP_REQUIREMENTS_DOWNLOAD = "--requirements_cache=skip"
CONNECT_TIMEOUT_SECONDS = 5


def check(config: PipelineConfig) -> None:
  """The engine flags of a run, local or on Kubeflow; Dataflow's own are checked with the rest
  of the cluster settings (pipeline.cluster_config.check_cluster_config)."""
  runner = config.beam_runner
  require(runner in BEAM_RUNNERS, "beam_runner", runner, f"must be one of {BEAM_RUNNERS}")
  if runner != "portable":
    for name in ("beam_job_endpoint", "beam_environment_config"):
      value = getattr(config, name)
      require(not value, name, value, f"is not used with beam_runner={runner}")
  if runner == "direct":
    return
  require(config.beam_workers == 0, "beam_workers", config.beam_workers,
          f"is for the direct runner; with beam_runner={runner} the engine scales its workers")
  require(runner != "dataflow" or config.kubeflow is not None, "beam_runner", runner,
          "is for Kubeflow runs (python -m kubeflow ... --image=...): Dataflow's workers run "
          "the pipeline image; locally, use direct or portable")
  if runner == "portable":
    _check_portable(config)


def _check_portable(config: PipelineConfig) -> None:
  require(HOST_PORT.fullmatch(config.beam_job_endpoint) is not None, "beam_job_endpoint",
          config.beam_job_endpoint, "must be host:port of the job server with "
          "beam_runner=portable (e.g. flink-jobserver.flink:8099)")
  kind, given = config.beam_environment_type, config.beam_environment_config
  require(kind in BEAM_ENVIRONMENT_TYPES, "beam_environment_type", kind,
          f"must be one of {BEAM_ENVIRONMENT_TYPES}")
  if kind == "EXTERNAL":
    require(HOST_PORT.fullmatch(given) is not None, "beam_environment_config", given,
            "must be host:port of the SDK worker pool with beam_environment_type=EXTERNAL")
  elif kind == "PROCESS" and given:
    require(_is_process_config(given), "beam_environment_config", given,
            'must be JSON with a "command" with beam_environment_type=PROCESS')
  elif config.kubeflow is None:  # Only a Kubeflow run has an image to default to.
    require(bool(given), "beam_environment_config", given,
            f"is required with beam_environment_type={kind} on a local run: the SDK harness "
            "image (DOCKER) or the boot command as JSON (PROCESS)")


def check_job_server_answers(config: PipelineConfig) -> None:
  """For a local run: the portable job server accepts connections, checked before any step
  (the first Beam step would otherwise fail after the steps before it ran)."""
  if config.beam_runner != "portable":
    return
  host, _, port = config.beam_job_endpoint.rpartition(":")
  try:
    socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_SECONDS).close()
  except OSError as error:
    require(False, "beam_job_endpoint", config.beam_job_endpoint,
            f"no job server answers there ({error.strerror or error})")


def portable_args(config: PipelineConfig, image: str = "") -> list:
  """Beam arguments submitting a step to the portable job server; `image`: the pipeline's
  (a Kubeflow run), the default harness of DOCKER and PROCESS."""
  environment = config.beam_environment_config or {
      "DOCKER": image, "PROCESS": json.dumps({"command": BEAM_BOOT})}[
          config.beam_environment_type]
  return ["--runner=PortableRunner", f"--job_endpoint={config.beam_job_endpoint}",
          f"--environment_type={config.beam_environment_type}",
          f"--environment_config={environment}"]


def _is_process_config(text: str) -> bool:
  try:
    value = json.loads(text)
  except ValueError:
    return False
  return isinstance(value, dict) and isinstance(value.get("command"), str)
