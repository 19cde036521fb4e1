"""`python -m kubeflow local-run`: the compiled spec executed by the KFP SDK's own orchestrator,
kfp.local, with our task handler for TFX containers (docs/kubeflow.md, "local-run").
"""
import contextlib
import dataclasses
import functools
import json
import os
import sys
import threading
import time
from typing import Callable, Dict, Iterator, List, Mapping, Optional

from google.protobuf import json_format
from kfp import local
from kfp.local import dag_orchestrator
from kfp.local import docker_task_handler
from kfp.local import executor_input_utils
from kfp.local import pipeline_orchestrator
from kfp.local import status
from kfp.local import subprocess_task_handler
from kfp.local import task_handler_interface
from kfp.pipeline_spec import pipeline_spec_pb2

from kubeflow import compiler
from kubeflow import conditions
from kubeflow import kfp_entrypoint
from kubeflow.cluster_config import IMAGE_PROJECT_DIR
from storage import object_storage

RUNNERS = ("subprocess", "docker")
# The Docker API's read timeout. podman's answers a followed log request only once the container
# first writes (docs/kubeflow.md, "What the container run found"), so it must outlast a task's
# quiet start; the stream itself has no timeout.
CONTAINER_API_TIMEOUT_SECONDS = 900
IMAGE_INTERPRETER = kfp_entrypoint.COMMAND[0]  # The image's, which every compiled command runs.
# How long a task's followed log may take to end once its container has exited (podman's: about
# 0.3 s, measured) before the log is read again without following (FollowedLog).
LOG_STREAM_GRACE_SECONDS = 5


@dataclasses.dataclass
class TaskRun:
  name: str  # The task's name in the spec.
  command: List[str]  # As run, placeholders substituted.
  executor_input: Optional[dict]  # The --json_serialized_invocation_args the task received.
  seconds: float
  succeeded: bool
  container: Optional[dict] = None  # --runner=docker: how the engine ran it (container_record).
  skipped: Optional[str] = None  # Why it did not run: its condition, or a skipped upstream task.


@dataclasses.dataclass
class LocalRun:
  run_root: str  # <pipeline root>/<pipeline name>-<timestamp>: kfp.local's run directory.
  tasks: Dict[str, TaskRun]
  seconds: float


def load_pipeline_spec(path: str, spec: dict) -> pipeline_spec_pb2.PipelineSpec:
  """The spec as the PipelineSpec kfp.local takes; raises naming an executor kfp.local (and
  an open-source backend) cannot run: a spec compiled with --kubeflow_target=vertex."""
  refused = sorted(f"{name} ({kind})" for name, executor in
                   spec["deploymentSpec"]["executors"].items() for kind in executor
                   if kind not in compiler.OPEN_SOURCE_EXECUTOR_KINDS)
  if refused:
    raise ValueError(f"Invalid --package {path!r}: executor(s) {', '.join(refused)} cannot "
                     "run locally (kfp.local runs container and importer executors only); "
                     "compile with --kubeflow_target=kfp.")
  pipeline_spec = pipeline_spec_pb2.PipelineSpec()
  json_format.ParseDict(spec, pipeline_spec)
  task_directories(pipeline_spec)
  return pipeline_spec


def task_directories(pipeline_spec: pipeline_spec_pb2.PipelineSpec) -> Dict[str, str]:
  """{directory: task} of kfp.local's run directory. kfp.local names a task's directory after
  its component minus the KFP SDK's `comp-` prefix (get_local_task_resource_name strips 5
  characters whatever they are); TFX names components after their node, without the prefix, so
  Pusher's outputs go to `r/`. Two tasks in one directory would overwrite each other: refused."""
  directories = {}
  for task_name, task in pipeline_spec.root.dag.tasks.items():
    directory = executor_input_utils.get_local_task_resource_name(task.component_ref.name)
    if not directory or directory in directories:
      clash = f" and {directories[directory]!r}" if directory else ""
      raise ValueError(f"kfp.local would write task {task_name!r}{clash} to the same "
                       f"directory {directory!r} (it drops the first 5 characters of each "
                       "component name); rename the component.")
    directories[directory] = task_name
  return directories


def _executor_input(command: List[str]) -> Optional[dict]:
  flag = kfp_entrypoint.INVOCATION_FLAG
  return json.loads(command[command.index(flag) + 1]) if flag in command[:-1] else None


def _task_directory(executor_input: Optional[dict]) -> str:
  """executor_input_utils.construct_local_task_root puts every output of a task under
  <run root>/<task directory>/, its executor output file too."""
  if executor_input is None:
    return ""
  return os.path.basename(os.path.dirname(executor_input["outputs"]["outputFile"]))


class TaskConditions:
  """The trigger conditions kfp.local does not evaluate (kfp 2.7's dag_orchestrator refuses any
  task that has one: validate_task_spec_not_loop_or_condition), evaluated as the KFP backend's
  driver does (kubeflow/conditions.py): a task whose condition is false, or that depends on a
  skipped task, is not run. kfp.local passes the outputs it provisioned for it downstream
  (_write_placeholder_outputs), where every consumer is skipped in
  turn."""

  def __init__(self, pipeline_spec: pipeline_spec_pb2.PipelineSpec):
    spec = json_format.MessageToDict(pipeline_spec)
    tasks = spec["root"]["dag"]["tasks"]
    self.tasks = {directory: (name, tasks[name])
                  for directory, name in task_directories(pipeline_spec).items()}
    self.skipped: Dict[str, str] = {}  # Task -> why it did not run.

  def reason_to_skip(self, executor_input: Optional[dict]) -> Optional[str]:
    """Why the task of this executor input does not run, or None; raises
    conditions.ConditionError where the backend's driver fails."""
    if executor_input is None:
      return None
    name, task = self.tasks[_task_directory(executor_input)]
    upstream = conditions.skipped_upstream(task, self.skipped)
    reason = f"upstream task {upstream} was skipped" if upstream else None
    condition = conditions.task_condition(task)
    if reason is None and condition and not conditions.evaluate(
        condition, {"inputs": executor_input.get("inputs", {})}):
      reason = f"condition {condition} is false"
    if reason:
      self.skipped[name] = reason
    return reason


def _write_placeholder_outputs(executor_input: dict) -> None:
  """A skipped task's executor output naming the artifacts kfp.local provisioned (nothing is
  written at their URIs): kfp.local takes a task's outputs from that file only, and resolves
  every consumer's inputs before the consumer's handler, which skips it, is reached."""
  outputs = executor_input["outputs"]
  os.makedirs(os.path.dirname(outputs["outputFile"]), exist_ok=True)
  with open(outputs["outputFile"], "w") as f:
    json.dump({"artifacts": outputs.get("artifacts", {})}, f)


class _RecordedTask:
  """What every handler here shares: the task's record, appended once it ends; a task its
  trigger condition skips is recorded without running."""

  def __init__(self, full_command: List[str], runs: List[TaskRun],
               task_conditions: Optional[TaskConditions] = None):
    self.runs = runs
    self.executor_input = _executor_input(full_command)
    self.container: Optional[dict] = None
    self.task_conditions = task_conditions

  def record(self, command: List[str], run: Callable[[], status.Status]) -> status.Status:
    start = time.monotonic()
    task_status = status.Status.FAILURE
    skipped = None
    try:
      if self.task_conditions is not None:
        try:
          skipped = self.task_conditions.reason_to_skip(self.executor_input)
        except conditions.ConditionError as error:
          print(f"local-run: task {_task_directory(self.executor_input)}: {error}", flush=True)
          return task_status
      if skipped:
        print(f"local-run: skipping task {_task_directory(self.executor_input)}: {skipped}",
              flush=True)
        _write_placeholder_outputs(self.executor_input)
        task_status = status.Status.SUCCESS
      else:
        task_status = run()
    finally:
      self.runs.append(TaskRun(_task_directory(self.executor_input), command,
                               self.executor_input, time.monotonic() - start,
                               task_status == status.Status.SUCCESS, self.container, skipped))
    return task_status


# kfp.local's SubprocessTaskHandler refuses any command without the KFP SDK's executor module
# (validate_not_container_component), i.e. every TFX container, and rewrites "python3" inside
# every argument; hence a handler of our own.
class VenvTaskHandler(task_handler_interface.ITaskHandler):
  """A container task's command run here: the image's interpreter becomes this venv's, every
  other argument is the spec's, substituted by kfp.local; output streamed by kfp.local's own
  run_local_subprocess."""

  def __init__(self, image: str, full_command: List[str], pipeline_root: str,
               runner: local.SubprocessRunner, runs: List[TaskRun],
               task_conditions: Optional[TaskConditions] = None):
    super().__init__(image, full_command, pipeline_root, runner)
    if runner.use_venv:
      raise ValueError("local-run runs tasks in this environment: SubprocessRunner("
                       "use_venv=False).")
    self.command = list(full_command)
    if self.command and self.command[0] == IMAGE_INTERPRETER:
      self.command[0] = sys.executable
    self.recorded = _RecordedTask(full_command, runs, task_conditions)

  def run(self) -> status.Status:
    def run_command() -> status.Status:
      return_code = subprocess_task_handler.run_local_subprocess(self.command)
      return status.Status.SUCCESS if return_code == 0 else status.Status.FAILURE
    return self.recorded.record(self.command, run_command)


def container_environment(environ: Mapping[str, str] = os.environ) -> Dict[str, str]:
  """What a cluster's Secret gives every step's pod (docs/kubeflow.md, "Object storage"), taken
  from this environment: the object-storage settings and credentials set here."""
  return {name: environ[name] for name in object_storage.POD_VARIABLES if environ.get(name)}


def container_record(attrs: dict) -> dict:
  """The engine's inspection of a task's container, reduced to what decides how it ran."""
  config, host = attrs["Config"], attrs["HostConfig"]
  return {"entrypoint": config.get("Entrypoint"), "cmd": config.get("Cmd"),
          "environment": sorted(item.split("=", 1)[0] for item in config.get("Env") or []),
          "mounts": sorted((m["Source"], m["Destination"]) for m in attrs.get("Mounts", [])),
          "network_mode": host.get("NetworkMode"), "user": config.get("User") or "",
          "working_dir": config.get("WorkingDir") or "", "image": config.get("Image")}


class FollowedLog:
  """A container's log printed as it comes, from a followed stream read in a daemon thread;
  finish(), once the container has exited, ends it. The container's exit ends a task, not the
  stream: podman 4.3's Docker API can keep a followed stream open forever when the container
  exits as the request is handled (it then waits for a "died" event that a state sync may
  already have written: libpod/container_log.go and libpod/events/logfile.go at v4.3.1). A
  stream not ended within LOG_STREAM_GRACE_SECONDS is closed, and what it has not printed is
  read without following; whatever the engine does then, the task keeps its exit code."""

  def __init__(self, container):
    self.container = container
    self.printed = 0  # Bytes of the log printed so far.
    self.stream = None
    self.error: Optional[Exception] = None
    self.finished = False
    self.lock = threading.Lock()
    self.thread = threading.Thread(target=self._follow, daemon=True)
    self.thread.start()

  def _follow(self) -> None:
    try:
      stream = self.container.logs(stream=True)
      with self.lock:
        self.stream = stream
        if self.finished:  # Answered after finish() gave up on it.
          _close_quietly(stream)
          return
      for chunk in stream:
        with self.lock:
          if self.finished:
            return
          print(chunk.decode(errors="replace"), end="", flush=True)
          self.printed += len(chunk)
    except Exception as error:  # finish() reads the log again.
      self.error = error

  def finish(self) -> None:
    self.thread.join(LOG_STREAM_GRACE_SECONDS)
    if not self.thread.is_alive() and self.error is None:
      return
    with self.lock:  # The thread prints nothing more.
      self.finished = True
      stream = self.stream
    if self.error is not None:
      reason = f"failed ({self.error!r})"
    elif stream is None:
      reason = f"was not answered within {LOG_STREAM_GRACE_SECONDS} s of the container's exit"
    else:
      reason = f"did not end within {LOG_STREAM_GRACE_SECONDS} s after the container exited"
      _close_quietly(stream)
    try:
      rest = self.container.logs(stream=False)[self.printed:]
    except Exception as error:  # The exit code stands; only the log's rest is missing.
      print(f"local-run: the engine's log stream {reason}, and reading the rest of the log "
            f"failed too ({error!r}).", flush=True)
      return
    print(f"local-run: the engine's log stream {reason}; {len(rest)} more bytes of the log, "
          "read without following:", flush=True)
    print(rest.decode(errors="replace"), end="", flush=True)


def _close_quietly(stream) -> None:
  """Closes a followed log stream; docker-py's can raise on some transports (ssh's
  DockerException), and the stream is being abandoned anyway."""
  with contextlib.suppress(Exception):
    stream.close()


class ContainerTaskHandler(docker_task_handler.DockerTaskHandler):
  """kfp.local's DockerTaskHandler (only the pipeline root bind-mounted, the image pulled when
  missing, the log streamed), its container started as a pod's is. kfp 2.7 passes the command
  as the image's CMD, so an image ENTRYPOINT (TFX's: Beam's boot) would receive it as arguments;
  a pod's `command` replaces the ENTRYPOINT, and so does this. The pod's Secret becomes the
  object-storage environment (container_environment), and the host's network lets the tasks
  reach what a subprocess task reaches. (kfp >= 2.14's DockerRunner passes environment and
  network_mode through, kubeflow/pipelines#12006, but still the command as CMD.)"""

  def __init__(self, image: str, full_command: List[str], pipeline_root: str,
               runner: local.DockerRunner, runs: List[TaskRun],
               task_conditions: Optional[TaskConditions] = None):
    super().__init__(image, full_command, pipeline_root, runner)
    self.recorded = _RecordedTask(full_command, runs, task_conditions)
    self.environment = container_environment()

  def run(self) -> status.Status:
    return self.recorded.record(self.full_command, self._run_container)

  def _run_container(self) -> status.Status:
    import docker  # kfp.local's DockerRunner needs it too.
    image = docker_task_handler.add_latest_tag_if_not_present(self.image)
    client = docker.from_env(timeout=CONTAINER_API_TIMEOUT_SECONDS)
    try:
      if not any(image in existing.tags for existing in client.images.list()):
        print(f"Pulling image {image!r}", flush=True)
        client.images.pull(image)
      container = client.containers.run(
          image=image, entrypoint=self.full_command[:1], command=self.full_command[1:],
          environment=self.environment, network_mode="host",
          volumes=self.get_volumes_to_mount(), detach=True)
      try:
        log = FollowedLog(container)
        exit_code = container.wait()["StatusCode"]
        log.finish()
        container.reload()
        self.recorded.container = container_record(container.attrs)
      finally:
        container.remove(force=True)
    finally:
      client.close()
    return status.Status.SUCCESS if exit_code == 0 else status.Status.FAILURE


def refuse_loops_only(task_spec: pipeline_spec_pb2.PipelineTaskSpec) -> None:
  """kfp.local's check of each task with conditions let through (TaskConditions evaluates
  them); a loop is still refused, as kfp.local refuses it."""
  if task_spec.WhichOneof("iterator"):
    raise NotImplementedError(
        "'dsl.ParallelFor' is not supported by local pipeline execution.")


@contextlib.contextmanager
def task_handlers(runs: List[TaskRun],
                  task_conditions: Optional[TaskConditions] = None) -> Iterator[None]:
  """kfp.local's dispatcher finds these handlers for its two runners while the context lasts,
  and its orchestrator lets tasks with a trigger condition through to them."""
  # kfp 2.7 has no handler registry: task_dispatcher.run_single_task_implementation looks up
  # these module attributes at each task, so they are swapped for the run and restored; so is
  # dag_orchestrator's check that refuses conditions.
  seams = ((subprocess_task_handler, "SubprocessTaskHandler",
            functools.partial(VenvTaskHandler, runs=runs, task_conditions=task_conditions)),
           (docker_task_handler, "DockerTaskHandler",
            functools.partial(ContainerTaskHandler, runs=runs, task_conditions=task_conditions)),
           (dag_orchestrator, "validate_task_spec_not_loop_or_condition", refuse_loops_only))
  originals = [getattr(module, name) for module, name, _ in seams]
  try:
    for module, name, replacement in seams:
      setattr(module, name, replacement)
    yield
  finally:
    for (module, name, _), original in zip(seams, originals):
      setattr(module, name, original)


def make_runner(name: str):
  """kfp.local's runner config; docker is refused up front when no daemon answers."""
  if name == "subprocess":
    return local.SubprocessRunner(use_venv=False)
  if name == "docker":
    import docker  # Installed with kfp.local's DockerRunner (the docker package).
    try:
      client = docker.from_env()
      client.ping()
      client.close()
    except docker.errors.DockerException as error:
      raise ValueError(f"--runner=docker: no Docker daemon answers ({error}); start Docker, "
                       "or use --runner=subprocess.") from error
    return local.DockerRunner()
  raise ValueError(f"Invalid --runner {name!r}: expected one of {list(RUNNERS)}.")


def paths_missing_here(spec: dict) -> List[str]:
  """"task: parameter=path" for each task parameter naming a file inside the image
  (IMAGE_PROJECT_DIR) that this machine does not have: --runner=subprocess runs tasks here,
  where such a task would fail with a traceback after the ones before it ran."""
  missing = []
  for task_name, task in spec.get("root", {}).get("dag", {}).get("tasks", {}).items():
    for name, value in task.get("inputs", {}).get("parameters", {}).items():
      constant = value.get("runtimeValue", {}).get("constant")
      if (isinstance(constant, str) and constant.startswith(IMAGE_PROJECT_DIR + "/")
          and not os.path.exists(constant)):
        missing.append(f"{task_name}: {name}={constant}")
  return missing


def check_pipeline_root(pipeline_root: str) -> str:
  if "://" in pipeline_root:
    raise ValueError(f"Invalid --pipeline_root {pipeline_root!r}: kfp.local reads and writes "
                     "its pipeline root as local files; pass a local directory.")
  return os.path.abspath(pipeline_root)


def run(pipeline_spec: pipeline_spec_pb2.PipelineSpec, runner, pipeline_root: str,
        arguments: Mapping[str, object]) -> LocalRun:
  """One run of the spec by kfp.local's orchestrator (pipeline_orchestrator.run_local_pipeline);
  raises RuntimeError naming the failed task."""
  start = time.monotonic()
  runs: List[TaskRun] = []
  local.init(runner=runner, pipeline_root=pipeline_root, raise_on_error=True)
  with task_handlers(runs, TaskConditions(pipeline_spec)):
    pipeline_orchestrator.run_local_pipeline(pipeline_spec, dict(arguments))
  directories = task_directories(pipeline_spec)
  for task in runs:
    task.name = directories[task.name]
  run_root = os.path.dirname(os.path.dirname(runs[0].executor_input["outputs"]["outputFile"]))
  return LocalRun(run_root, {task.name: task for task in runs}, time.monotonic() - start)
