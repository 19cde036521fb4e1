"""The project's Dockerfile built here (podman, a local Debian base: test_support/container_image.py)
and the compiled tiny spec run task by task in containers of that image by `python -m kubeflow
local-run --runner=docker` (kfp.local's DockerRunner on podman's Docker API), twice: run 1
pushes a model to a local S3 server, run 2's Evaluator gets it as its baseline and refuses a
degraded candidate. The build is cached by a hash of its inputs: a rerun builds nothing."""
import importlib
import json
import os
import re
import subprocess
import sys
import time

import pytest

from kubeflow import cli
from kubeflow import local_run
from kubeflow import submit
from kubeflow.cluster_config import IMAGE_PROJECT_DIR
from test_support import container_image
from test_support import container_run
from test_support import kfp_harness

pytestmark = [pytest.mark.container, pytest.mark.e2e]
PROJECT_DIR = container_image.PROJECT_DIR


@pytest.fixture(scope="module")
def image():
  """(podman's environment, the image's name, build seconds or None when it was found)."""
  environ = container_image.podman_environ()
  tag, seconds = container_image.build_image(environ)
  print(json.dumps({"image": tag, "build s": seconds and round(seconds)}))
  return environ, tag, seconds


@pytest.fixture(scope="module")
def podman_service(image):
  with container_image.PodmanService(image[0]) as service:
    yield service


@pytest.fixture(scope="module")
def compiled(image, s3_server, tmp_path_factory):
  return container_run.compile_for_image(s3_server, str(tmp_path_factory.mktemp("package")),
                                         image[1], [])


def _project_packages():
  return {name for name in os.listdir(PROJECT_DIR)
          if os.path.isfile(os.path.join(PROJECT_DIR, name, "__init__.py"))}


def _named_modules(spec: dict) -> list:
  """Every project module the spec names (entrypoint modules, executor classes, run_fn and
  other exec properties), as an importable module path."""
  pattern = re.compile(r"\b((?:%s)(?:\.\w+)+)" % "|".join(sorted(_project_packages())))
  names = set(pattern.findall(json.dumps(spec)))
  modules = set()
  for name in names:
    while name and importlib.util.find_spec(name.split(".")[0]) is not None:
      try:
        if importlib.util.find_spec(name) is not None:
          modules.add(name)
          break
      except ModuleNotFoundError:
        pass
      name = name.rpartition(".")[0]  # A class or function of the module before it.
  return sorted(modules)


IMPORT_SCRIPT = """
import importlib, json, sys
for name in sys.argv[2:]:
  importlib.import_module(name)
print(json.dumps(sorted(name for name, module in sys.modules.items()
                        if (getattr(module, "__file__", None) or "").startswith(sys.argv[1]))))
"""


def test_every_project_module_the_compiled_spec_runs_imports_inside_the_image(
    image, compiled, podman_service):
  """What the spec's commands import (here, transitively), imported in a container of the
  image: a package the image does not copy fails here, not on a cluster."""
  import docker
  _, compiled_spec = compiled
  spec = submit.load_spec(compiled_spec.spec_path)  # The pipeline, not the platform section.
  named = _named_modules(spec)
  assert "kubeflow.kfp_entrypoint" in named and "trainer_module.tfx_trainer" in named, named
  here = subprocess.run([sys.executable, "-c", IMPORT_SCRIPT, PROJECT_DIR + os.sep, *named],
                        cwd=PROJECT_DIR, capture_output=True, text=True, check=True,
                        env=dict(os.environ, PYTHONPATH=PROJECT_DIR))
  imported_here = [name for name in json.loads(here.stdout.splitlines()[-1])
                   if name.split(".")[0] in _project_packages()]
  assert {name.split(".")[0] for name in imported_here} >= {
      "kubeflow", "storage", "components", "trainer_module"}, imported_here
  client = docker.DockerClient(base_url=podman_service.environ()["DOCKER_HOST"],
                               timeout=local_run.CONTAINER_API_TIMEOUT_SECONDS)
  try:
    container = client.containers.run(
        image[1], entrypoint=["python", "-c", IMPORT_SCRIPT],
        command=[IMAGE_PROJECT_DIR + "/", *imported_here], working_dir="/", detach=True)
    try:
      exit_code = container.wait()["StatusCode"]
      output = container.logs(stderr=False).decode(errors="replace")
      errors = container.logs(stdout=False).decode(errors="replace")
    finally:
      container.remove(force=True)
  finally:
    client.close()
  assert exit_code == 0, errors[-3000:]
  # From "/" the copies under /pipeline are not on sys.path: the installed project answers.
  in_image = json.loads(output.splitlines()[-1])
  assert not in_image, f"imported from the source tree, not the installed project: {in_image}"


def test_the_compiled_spec_runs_in_containers_of_the_image_twice_with_the_baseline_handed_over(
    image, compiled, podman_service, s3_server, tmp_path, monkeypatch):
  config, compiled_spec = compiled
  runs = []
  run = local_run.run
  monkeypatch.setattr(local_run, "run", lambda *args, **kwargs: runs.append(run(*args, **kwargs))
                      or runs[-1])
  for name, value in container_run.task_environ(s3_server, podman_service).items():
    monkeypatch.setenv(name, value)
  root = str(tmp_path / "root")
  times = {}

  start = time.monotonic()
  assert cli.main(container_run.local_run_command(compiled_spec.spec_path, root)) == 0
  times["run 1 s"] = round(time.monotonic() - start)
  (first,) = runs
  assert set(first.tasks) == set(
      submit.load_spec(compiled_spec.spec_path)["root"]["dag"]["tasks"])
  for task in first.tasks.values():  # Each in its own container, as a pod runs it.
    container = task.container
    assert container["entrypoint"] == ["python"], task.name  # The image's ENTRYPOINT replaced.
    assert container["cmd"] == task.command[1:]
    assert container["mounts"] == [(root, root)], task.name  # Only the pipeline root.
    assert container["network_mode"] == "host"
    assert {"AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(
        container["environment"])
    assert container["working_dir"] == IMAGE_PROJECT_DIR and container["user"] in ("", "root")
  versions = kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir)
  assert len(versions) == 1
  first_version = f"{config.runner.serving_model_dir}/{versions[0]}"
  assert kfp_harness.local_output_metadata(first.tasks["Evaluator"], "blessing")["blessed"] == 1

  start = time.monotonic()
  assert cli.main(container_run.local_run_command(compiled_spec.spec_path, root,
                                                  *container_run.SECOND_RUN_FLAGS)) == 0
  times["run 2 s"] = round(time.monotonic() - start)
  second = runs[1]
  production = kfp_harness.local_output_metadata(second.tasks["ProductionModel"], "model")
  assert production["production_version"] == first_version
  evaluator = second.tasks["Evaluator"]
  (baseline,) = evaluator.executor_input["inputs"]["artifacts"]["baseline_model"]["artifacts"]
  blessing = kfp_harness.local_output_metadata(evaluator, "blessing")
  assert blessing["baseline_model"] == baseline["uri"]
  assert blessing["blessed"] == 0
  assert kfp_harness.local_output_metadata(second.tasks["Pusher"], "pushed_model")["pushed"] == 0
  assert kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir) == versions
  times.update({f"{name} s": round(task.seconds) for name, task in first.tasks.items()})
  print(json.dumps(times))


def test_an_unchanged_build_is_found_not_rebuilt(image):
  environ, tag, _ = image
  assert container_image.build_image(environ) == (tag, None)  # None: no build ran.
