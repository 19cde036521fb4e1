"""The engines of the Beam steps: direct (DirectRunner in the step's process), portable (a
Flink, Spark or Beam job server and its SDK harnesses) and dataflow (Kubeflow runs only,
kubeflow/cluster_config.py). docs/kubeflow.md, "Beam engines", says what each needs."""
import json
import re
import socket

from trainer_module.config import require

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


def check_job_server_answers(endpoint: str) -> None:
  """For a local run: the portable job server at `endpoint` accepts connections, checked before
  any step (the first Beam step would otherwise fail after the steps before it ran)."""
  host, _, port = endpoint.rpartition(":")
  try:
    socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_SECONDS).close()
  except OSError as error:
    require(False, "beam_job_endpoint", endpoint,
            f"no job server answers there ({error.strerror or error})")


# Beam's portable runner opens the job's state stream with the job server timeout as its gRPC
# deadline and follows it until the job ends (apache_beam/runners/portability/
# portable_runner.py, JobServiceHandle.run: GetStateStream(..., timeout=job_server_timeout);
# default 60 s, options/pipeline_options.py): with the default, every step whose Beam job runs
# longer than a minute fails with DEADLINE_EXCEEDED. A week bounds the wait instead.
JOB_SERVER_TIMEOUT_SECONDS = 7 * 24 * 3600


def portable_args(endpoint: str, environment_type: str, environment_config: str,
                  image: str) -> list:
  """Beam arguments submitting a step to the portable job server; `image`: the pipeline's
  (a Kubeflow run), the default harness of DOCKER; PROCESS defaults to Beam's boot program."""
  environment = environment_config or {
      "DOCKER": image, "PROCESS": json.dumps({"command": BEAM_BOOT})}[environment_type]
  return ["--runner=PortableRunner", f"--job_endpoint={endpoint}",
          f"--environment_type={environment_type}", f"--environment_config={environment}",
          f"--job_server_timeout={JOB_SERVER_TIMEOUT_SECONDS}"]


def is_process_config(text: str) -> bool:
  try:
    value = json.loads(text)
  except ValueError:
    return False
  return isinstance(value, dict) and isinstance(value.get("command"), str)
