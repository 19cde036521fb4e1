"""`python -m kubeflow local-run`: kfp.local's orchestrator with this project's task handler."""
import json
import subprocess
import sys
import threading
import types

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
    (["--runner=podman"], "Invalid --runner 'podman': expected one of ['subprocess', 'docker']"),
    (["--pipeline_root=s3://bucket/root"], "Invalid --pipeline_root 's3://bucket/root': kfp.local "
     "reads and writes its pipeline root as local files"),
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


def _returns_within(seconds, function, what):
  """function()'s value, run in a daemon thread; fails naming `what` if it has not returned
  within `seconds` (the thread is left behind)."""
  outcome = {}

  def call():
    try:
      outcome["value"] = function()
    except BaseException as error:  # pylint: disable=broad-except; re-raised below.
      outcome["error"] = error

  thread = threading.Thread(target=call, daemon=True)
  thread.start()
  thread.join(seconds)
  if thread.is_alive():
    pytest.fail(f"{what} did not return within {seconds} s")
  if "error" in outcome:
    raise outcome["error"]
  return outcome["value"]


class _FakeContainer:
  """The docker client's container as ContainerTaskHandler uses it. Its followed log yields the
  first `streamed` chunks, then does `then`: "end"s, "block"s until closed (as podman 4.3's did
  after a quick container's exit) or raises it; "no answer": the request blocks (podman answers
  only once the container writes; docs/kubeflow.md). wait() answers once those chunks are out."""

  def __init__(self, chunks, streamed, then, exit_code, close_error=None, read_error=None):
    self.chunks, self.streamed, self.then, self.exit_code = chunks, streamed, then, exit_code
    self.close_error, self.read_error = close_error, read_error
    self.streamed_all = threading.Event()
    self.answered = threading.Event()  # "late answer": the request is answered once set.
    self.closed = threading.Event()
    self.unfollowed_reads = 0
    self.removed = False
    self.attrs = {"Config": {"Entrypoint": ["python"], "Cmd": ["-c", "x"]},
                  "HostConfig": {"NetworkMode": "host"}}

  def logs(self, stream=False):
    if not stream:
      self.unfollowed_reads += 1
      if self.read_error:
        raise self.read_error
      return b"".join(self.chunks)
    if self.then == "no answer":
      self.streamed_all.set()
      self.closed.wait()  # Set by the test, not by the code under test.
      return iter(())
    if self.then == "late answer":
      self.streamed_all.set()
      self.answered.wait()
    container = self

    class Stream:
      def __iter__(self):
        yield from container.chunks[:container.streamed]
        container.streamed_all.set()
        if container.then in ("block", "late answer"):
          container.closed.wait()
        elif container.then != "end":
          raise container.then

      def close(self):
        container.closed.set()
        if container.close_error:
          raise container.close_error
    return Stream()

  def wait(self):
    self.streamed_all.wait()
    return {"StatusCode": self.exit_code}

  def reload(self):
    pass

  def remove(self, force):
    self.removed = force


def _handler_on(monkeypatch, tmp_path, container, runs):
  """A ContainerTaskHandler whose docker client (docker.from_env) runs `container`."""
  import docker
  client = types.SimpleNamespace(
      images=types.SimpleNamespace(list=lambda: [types.SimpleNamespace(tags=["wrn:1"])]),
      containers=types.SimpleNamespace(run=lambda **kwargs: container), close=lambda: None)
  monkeypatch.setattr(docker, "from_env", lambda **kwargs: client)
  return local_run.ContainerTaskHandler(image="wrn:1", full_command=["python", "-c", "x"],
                                        pipeline_root=str(tmp_path), runner=None, runs=runs)


LOG_CHUNKS = [b"step 1\n", b"step 2: \xc3\xa9\n", b"last line, after the stream stopped\n"]


@pytest.mark.parametrize("streamed, then", [(0, "no answer"), (0, "block"), (1, "block"),
                                            (2, "block")])
def test_a_task_ends_when_its_container_exits_though_the_followed_log_never_ends(
    tmp_path, monkeypatch, capsys, streamed, then):
  """podman 4.3's Docker API can leave a quick container's followed log open forever
  (local_run.FollowedLog); the task still ends, and prints each byte of its log once."""
  monkeypatch.setattr(local_run, "LOG_STREAM_GRACE_SECONDS", 0.2)
  container = _FakeContainer(LOG_CHUNKS, streamed, then, exit_code=0)
  runs = []
  handler = _handler_on(monkeypatch, tmp_path, container, runs)
  try:
    task_status = _returns_within(10, handler.run, "a task whose log stream never ends")
    assert container.closed.is_set() == (then == "block")  # The stream, once answered, closed.
  finally:
    container.closed.set()  # Lets the follower's thread (the old code's loop) end.
  assert task_status == status.Status.SUCCESS
  assert runs[0].succeeded and runs[0].container["entrypoint"] == ["python"]
  assert container.removed
  out = capsys.readouterr().out
  rest = len(b"".join(LOG_CHUNKS[streamed:]))
  why = ("was not answered within 0.2 s of the container's exit" if then == "no answer" else
         "did not end within 0.2 s after the container exited")
  notice = (f"local-run: the engine's log stream {why}; {rest} more bytes of the log, read "
            "without following:\n")
  assert out.count(notice) == 1
  assert out.replace(notice, "") == b"".join(LOG_CHUNKS).decode()


def test_a_follow_request_answered_after_the_task_ended_is_closed_and_prints_nothing(
    tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(local_run, "LOG_STREAM_GRACE_SECONDS", 0.2)
  container = _FakeContainer(LOG_CHUNKS, 2, "late answer", exit_code=0)
  handler = _handler_on(monkeypatch, tmp_path, container, [])
  assert _returns_within(10, handler.run, "a task") == status.Status.SUCCESS
  printed = capsys.readouterr().out
  container.answered.set()
  try:
    assert container.closed.wait(5), "the late stream was left open"
  finally:
    container.closed.set()
  assert capsys.readouterr().out == ""  # Its chunks were printed once, from the re-read.
  assert printed.endswith(b"".join(LOG_CHUNKS).decode())


@pytest.mark.parametrize("failure", ["close", "re-read"])
def test_a_task_keeps_its_exit_code_when_the_engine_fails_after_the_exit(
    tmp_path, monkeypatch, capsys, failure):
  """Closing the stuck stream (docker-py over ssh raises DockerException) or reading the log
  again may fail: the task's status is still its container's exit code."""
  monkeypatch.setattr(local_run, "LOG_STREAM_GRACE_SECONDS", 0.2)
  container = _FakeContainer(
      LOG_CHUNKS, 1, "block", exit_code=3,
      close_error=RuntimeError("not a socket") if failure == "close" else None,
      read_error=ConnectionError("engine gone") if failure == "re-read" else None)
  runs = []
  handler = _handler_on(monkeypatch, tmp_path, container, runs)
  try:
    task_status = _returns_within(10, handler.run, "a task")
  finally:
    container.closed.set()
  assert task_status == status.Status.FAILURE and not runs[0].succeeded  # Exit code 3.
  out = capsys.readouterr().out
  assert out.startswith(LOG_CHUNKS[0].decode())
  if failure == "close":
    assert out.endswith(b"".join(LOG_CHUNKS[1:]).decode())
  else:
    assert ("did not end within 0.2 s after the container exited, and reading the rest of the "
            "log failed too (ConnectionError('engine gone'))." in out)


def test_a_followed_log_that_ends_is_printed_once_and_not_read_again(
    tmp_path, monkeypatch, capsys):
  container = _FakeContainer(LOG_CHUNKS, len(LOG_CHUNKS), "end", exit_code=3)
  runs = []
  handler = _handler_on(monkeypatch, tmp_path, container, runs)
  task_status = _returns_within(10, handler.run, "a task whose log stream ends")
  assert task_status == status.Status.FAILURE and not runs[0].succeeded
  assert capsys.readouterr().out == b"".join(LOG_CHUNKS).decode()
  assert container.unfollowed_reads == 0


def test_a_followed_log_that_fails_is_read_again_from_where_it_stopped(
    tmp_path, monkeypatch, capsys):
  container = _FakeContainer(LOG_CHUNKS, 1, ConnectionError("reset"), exit_code=0)
  handler = _handler_on(monkeypatch, tmp_path, container, [])
  assert _returns_within(10, handler.run, "a task") == status.Status.SUCCESS
  out = capsys.readouterr().out
  notice = ("local-run: the engine's log stream failed (ConnectionError('reset')); 47 more "
            "bytes of the log, read without following:\n")
  assert out == LOG_CHUNKS[0].decode() + notice + b"".join(LOG_CHUNKS[1:]).decode()


ENTRYPOINT_PAUSE_SECONDS = 2
# What kfp 2.7's own handler may take on podman_with_an_entrypoint_image's image (about 4 s):
# past it, its followed log is taken to hang, a failure rather than a stuck suite.
KFP_HANDLER_SECONDS = 120


@pytest.fixture(scope="module")
def podman_with_an_entrypoint_image(tmp_path_factory):
  """podman's Docker API (test_support/container_image.py) and an image of the local Debian base
  with an ENTRYPOINT, as TFX's image has one (Beam's boot), that refuses what it is given. It
  waits ENTRYPOINT_PAUSE_SECONDS first: kfp 2.7's own handler follows the log, and podman 4.3
  can leave that stream open forever when the container exits as the request arrives
  (local_run.FollowedLog). Measured here: kfp's own handler hung on 4 of 150 quick-exit
  containers and on none of 150 that paused 2 s; the docker client reading the log as kfp does,
  on 7 of 400 quick-exit containers and none of 380 that paused 1 or 2 s."""
  from test_support import container_image
  environ = container_image.podman_environ()
  container_image.build_base_image(environ)
  context = tmp_path_factory.mktemp("entrypoint_image")
  (context / "Dockerfile").write_text(
      f"FROM {container_image.BASE_IMAGE}\n"
      f'ENTRYPOINT ["sh", "-c", "sleep {ENTRYPOINT_PAUSE_SECONDS}; '
      'echo the image entrypoint got: \\"$@\\" >&2; exit 3", "boot"]\n')
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
  task_status = _returns_within(
      KFP_HANDLER_SECONDS, handler.run,
      "kfp 2.7's own DockerTaskHandler (podman's followed log stream not ending after the "
      "container exited? local_run.FollowedLog)")
  assert task_status == status.Status.FAILURE
  assert "the image entrypoint got: python -c print('the task ran')" in capsys.readouterr().out


@pytest.mark.parametrize("train, ran", [(1, ["Decide", "Gated", "After", "Other"]),
                                        (0, ["Decide", "Other"])])
def test_a_false_trigger_condition_skips_the_task_and_every_task_after_it(tmp_path, train, ran):
  """kfp.local refuses conditions; local-run evaluates them as the backend's driver does."""
  from test_support import condition_specs
  record = str(tmp_path / "ran.txt")
  spec = local_run.load_pipeline_spec("gated.yaml", condition_specs.gated_spec(record))
  run = local_run.run(spec, local_run.make_runner("subprocess"), str(tmp_path / "root"),
                      {"train": train})
  assert sorted(condition_specs.ran(record)) == sorted(ran)
  assert all(task.succeeded for task in run.tasks.values())
  skipped = {name: task.skipped for name, task in run.tasks.items() if task.skipped}
  assert skipped == condition_specs.skipped_when(train)


def test_a_condition_that_cannot_be_evaluated_fails_the_task(tmp_path):
  from test_support import condition_specs
  record = str(tmp_path / "ran.txt")
  spec = local_run.load_pipeline_spec("gated.yaml", condition_specs.gated_spec(
      record, condition="inputs.artifacts['_Decide.decision'].artifacts[0].uri"))
  with pytest.raises(RuntimeError, match="Gated"):
    local_run.run(spec, local_run.make_runner("subprocess"), str(tmp_path / "root"), {})
  assert "Gated" not in condition_specs.ran(record)
