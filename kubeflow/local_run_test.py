"""`python -m kubeflow local-run`: kfp.local's orchestrator with this project's task handler."""
import json
import subprocess
import sys

import pytest
import yaml
from kfp.local import docker_task_handler
from kfp.local import status
from kfp.local import subprocess_task_handler

from kubeflow import cli
from kubeflow import kfp_entrypoint
from kubeflow import local_run

# A task that checks the input artifact it was given (if any), then writes its output artifact
# and the executor output file, as a TFX container does through kfp_entrypoint.
TASK_SCRIPT = """
import json, os, sys
executor_input = json.loads(sys.argv[sys.argv.index("--json_serialized_invocation_args") + 1])
inputs = executor_input["inputs"].get("artifacts", {})
count = 0
if inputs:
  (given,) = inputs["numbers"]["artifacts"]
  count = json.load(open(given["uri"]))["count"]
  assert given["metadata"]["count"] == count, given
(out,) = executor_input["outputs"]["artifacts"]["numbers"]["artifacts"]
os.makedirs(os.path.dirname(out["uri"]), exist_ok=True)
json.dump({"count": count + 1}, open(out["uri"], "w"))
out["metadata"] = {"count": count + 1}
json.dump({"artifacts": {"numbers": {"artifacts": [out]}}},
          open(executor_input["outputs"]["outputFile"], "w"))
"""
NUMBERS = {"artifactType": {"instanceSchema": "title: tfx.Examples\ntype: object\n"}}


def _spec(image="localhost/wrn-pipeline:test"):
  """Two container tasks: FirstCount makes an artifact, SecondCount reads and extends it."""
  container = {"image": image, "command": ["python", "-c", TASK_SCRIPT],
               "args": [kfp_entrypoint.INVOCATION_FLAG, "{{$}}"]}
  return {
      "pipelineInfo": {"name": "counting"}, "schemaVersion": "2.1.0",
      "defaultPipelineRoot": "s3://bucket/root",
      "deploymentSpec": {"executors": {"FirstCount_executor": {"container": container},
                                       "SecondCount_executor": {"container": container}}},
      "components": {
          "FirstCount": {"executorLabel": "FirstCount_executor",
                         "outputDefinitions": {"artifacts": {"numbers": NUMBERS}}},
          "SecondCount": {"executorLabel": "SecondCount_executor",
                          "inputDefinitions": {"artifacts": {"numbers": NUMBERS}},
                          "outputDefinitions": {"artifacts": {"numbers": NUMBERS}}}},
      "root": {"dag": {"tasks": {
          "FirstCount": {"componentRef": {"name": "FirstCount"},
                         "taskInfo": {"name": "FirstCount"}},
          "SecondCount": {"componentRef": {"name": "SecondCount"},
                          "taskInfo": {"name": "SecondCount"},
                          "dependentTasks": ["FirstCount"],
                          "inputs": {"artifacts": {"numbers": {"taskOutputArtifact": {
                              "producerTask": "FirstCount",
                              "outputArtifactKey": "numbers"}}}}}}}},
  }


def test_kfp_local_runs_each_container_command_here_and_passes_artifacts_downstream(tmp_path):
  spec = local_run.load_pipeline_spec("counting.yaml", _spec())
  run = local_run.run(spec, local_run.make_runner("subprocess"), str(tmp_path), {})
  assert list(run.tasks) == ["FirstCount", "SecondCount"]
  first, second = run.tasks["FirstCount"], run.tasks["SecondCount"]
  assert all(task.succeeded for task in run.tasks.values())
  # The spec's command, the image's interpreter replaced by this one.
  assert first.command[:2] == [sys.executable, "-c"]
  # kfp.local's own layout: <root>/<pipeline>-<timestamp>/<component without 5 chars>/<output>.
  assert run.run_root.startswith(str(tmp_path / "counting-"))
  (out,) = first.executor_input["outputs"]["artifacts"]["numbers"]["artifacts"]
  assert out["uri"] == f"{run.run_root}/Count/numbers"
  (given,) = second.executor_input["inputs"]["artifacts"]["numbers"]["artifacts"]
  assert given["uri"] == out["uri"] and given["metadata"] == {"count": 1}
  # How kfp.local types an artifact read back from an executor output: its own fallback class.
  assert given["type"] == {"schemaTitle": "system.Artifact", "schemaVersion": "0.0.1"}
  (last,) = second.executor_input["outputs"]["artifacts"]["numbers"]["artifacts"]
  assert json.load(open(last["uri"])) == {"count": 2}


def test_kfp_local_own_handlers_are_back_after_a_run(tmp_path):
  handlers = (subprocess_task_handler.SubprocessTaskHandler,
              docker_task_handler.DockerTaskHandler)
  spec = local_run.load_pipeline_spec("counting.yaml", _spec())
  local_run.run(spec, local_run.make_runner("subprocess"), str(tmp_path), {})
  assert (subprocess_task_handler.SubprocessTaskHandler,
          docker_task_handler.DockerTaskHandler) == handlers


def test_kfp_local_own_subprocess_handler_refuses_a_container_component():
  """Why local-run has its own handler: kfp.local's runs only lightweight Python components."""
  with pytest.raises(RuntimeError, match="only supports running Lightweight Python Components"):
    subprocess_task_handler.SubprocessTaskHandler(
        image="python:3.11", full_command=list(kfp_entrypoint.COMMAND), pipeline_root="/tmp",
        runner=local_run.make_runner("subprocess"))


def test_the_docker_runner_is_ours_on_kfp_locals_docker_handler_only_while_the_run_lasts(
    tmp_path, monkeypatch):
  """What kfp.local builds for a docker task is our ContainerTaskHandler (a pod's object-storage
  environment), a kind of its own handler on the spec's image; after the run, kfp's own again."""
  monkeypatch.setenv("AWS_REGION", "us-east-1")
  kfps_own = docker_task_handler.DockerTaskHandler
  runs = []
  with local_run.task_handlers(runs):
    handler = docker_task_handler.DockerTaskHandler(
        image="gcr.io/p/wrn:1", full_command=["python", "-m", "x"],
        pipeline_root=str(tmp_path), runner=None)
  assert isinstance(handler, local_run.ContainerTaskHandler) and isinstance(handler, kfps_own)
  assert handler.environment["AWS_REGION"] == "us-east-1"
  assert docker_task_handler.DockerTaskHandler is kfps_own  # Restored.
  assert handler.image == "gcr.io/p/wrn:1" and handler.full_command == ["python", "-m", "x"]
  assert handler.get_volumes_to_mount() == {str(tmp_path): {"bind": str(tmp_path), "mode": "rw"}}


def test_docker_without_a_daemon_is_refused_in_one_line(monkeypatch, capsys):
  monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
  with pytest.raises(ValueError, match="--runner=docker: no Docker daemon answers"):
    local_run.make_runner("docker")


def test_a_vertex_spec_is_refused_naming_the_executor():
  spec = _spec()
  spec["deploymentSpec"]["executors"]["latest_blessed_model_resolver"] = {"resolver": {}}
  with pytest.raises(ValueError, match=r"latest_blessed_model_resolver \(resolver\) cannot run "
                                       "locally.*--kubeflow_target=kfp"):
    local_run.load_pipeline_spec("vertex.yaml", spec)


def test_two_tasks_kfp_local_would_put_in_one_directory_are_refused():
  spec = _spec()
  spec["components"]["SeconCount"] = spec["components"].pop("SecondCount")  # Both -> "Count".
  spec["root"]["dag"]["tasks"]["SecondCount"]["componentRef"]["name"] = "SeconCount"
  with pytest.raises(ValueError, match="Count' to the same directory 'Count'"):
    local_run.load_pipeline_spec("counting.yaml", spec)


@pytest.mark.parametrize("flags, message", [
    (["--runner=podman"], "Invalid --runner 'podman'"),
    (["--pipeline_root=s3://bucket/root"], "Invalid --pipeline_root 's3://bucket/root'"),
    (["--data_root=gs://bucket/images"], "--data_root applies to pipelines compiled with "
                                         "--dataset=tfrecord"),
])
def test_bad_local_run_flags_exit_2_before_running(tmp_path, monkeypatch, capsys, flags, message):
  monkeypatch.chdir(tmp_path)
  package = tmp_path / "counting.yaml"
  package.write_text(yaml.safe_dump(_spec()))
  assert cli.main(["local-run", f"--package={package}", *flags]) == 2
  assert message in capsys.readouterr().err
  assert not (tmp_path / "outputs").exists()


def test_a_spec_reading_a_file_inside_the_image_is_refused_before_any_task_runs(
    tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  spec = _spec()
  spec["root"]["dag"]["tasks"]["FirstCount"]["inputs"] = {"parameters": {"schema_file": {
      "runtimeValue": {"constant": "/pipeline/components/schema.pbtxt"}}}}
  package = tmp_path / "counting.yaml"
  package.write_text(yaml.safe_dump(spec))
  assert cli.main(["local-run", f"--package={package}"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and len(err.splitlines()) == 1, err
  assert ("names files inside the image that this machine does not have (FirstCount: "
          "schema_file=/pipeline/components/schema.pbtxt)") in err
  assert "Traceback" not in err and not (tmp_path / "outputs").exists()


@pytest.fixture(scope="module")
def podman_with_an_entrypoint_image(tmp_path_factory):
  """podman's Docker API (testing/container_image.py) and an image of the local Debian base
  with an ENTRYPOINT, as TFX's image has one (Beam's boot), that refuses what it is given."""
  from testing import container_image
  environ = container_image.podman_environ()
  container_image.build_base_image(environ)
  context = tmp_path_factory.mktemp("entrypoint_image")
  (context / "Dockerfile").write_text(
      f"FROM {container_image.BASE_IMAGE}\n"
      'ENTRYPOINT ["sh", "-c", "echo the image entrypoint got: \\"$@\\" >&2; exit 3", "boot"]\n')
  image = "localhost/wrn-local-base:with-entrypoint"
  container_image.podman(["build", "--quiet", f"--tag={image}", str(context)], environ,
                         stdout=subprocess.DEVNULL)
  with container_image.PodmanService(environ) as service:
    yield service, image
  left = container_image.podman(["ps", "--all", "--quiet", f"--filter=ancestor={image}"],
                                environ, capture_output=True, text=True).stdout.split()
  if left:  # kfp 2.7's own handler leaves its container behind.
    container_image.podman(["rm", "--force", *left], environ, stdout=subprocess.DEVNULL)


@pytest.mark.container
def test_the_docker_runner_starts_each_task_as_a_pod_does(
    tmp_path, monkeypatch, podman_with_an_entrypoint_image):
  service, image = podman_with_an_entrypoint_image
  for name, value in service.environ().items():
    monkeypatch.setenv(name, value)
  monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
  monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-the-log")
  monkeypatch.setenv("UNRELATED_SETTING", "stays here")
  spec = local_run.load_pipeline_spec("counting.yaml", _spec(image))
  run = local_run.run(spec, local_run.make_runner("docker"), str(tmp_path), {})
  first, second = run.tasks["FirstCount"], run.tasks["SecondCount"]
  assert first.succeeded and second.succeeded
  (last,) = second.executor_input["outputs"]["artifacts"]["numbers"]["artifacts"]
  assert json.load(open(last["uri"])) == {"count": 2}  # Written through the bind mount.
  # The spec's command replaced the image's ENTRYPOINT, as a pod's `command` does.
  assert first.container["entrypoint"] == ["python"]
  assert first.container["cmd"] == first.command[1:]
  assert first.container["mounts"] == [(str(tmp_path), str(tmp_path))]
  assert first.container["network_mode"] == "host"
  assert {"AWS_ENDPOINT_URL_S3", "AWS_SECRET_ACCESS_KEY"} <= set(first.container["environment"])
  assert "UNRELATED_SETTING" not in first.container["environment"]


@pytest.mark.container
def test_kfp_locals_own_docker_handler_gives_the_command_to_the_images_entrypoint(
    tmp_path, monkeypatch, podman_with_an_entrypoint_image, capsys):
  """Why local-run starts containers itself: kfp 2.7's run_docker_container passes the command
  as CMD, so TFX's image would run Beam's boot with the task's command as its arguments."""
  service, image = podman_with_an_entrypoint_image
  for name, value in service.environ().items():
    monkeypatch.setenv(name, value)
  handler = docker_task_handler.DockerTaskHandler(
      image=image, full_command=["python", "-c", "print('the task ran')"],
      pipeline_root=str(tmp_path), runner=local_run.make_runner("docker"))
  assert handler.run() == status.Status.FAILURE
  assert "the image entrypoint got: python -c print('the task ran')" in capsys.readouterr().out
