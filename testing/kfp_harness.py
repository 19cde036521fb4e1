"""Executes a compiled KFP v2 pipeline spec the way an open-source Kubeflow Pipelines backend
does, on this machine: the proof that the YAML users upload runs.

What it follows, in kubeflow/pipelines (backend/src/v2):
- compiler/argocompiler/dag.go: only container and importer executors run; a resolver or
  customJob executor fails the whole pipeline before anything starts.
- driver/root_dag.go, driver/resolve.go: runtime parameters are the run's values over the
  pipeline's defaults; each task's parameters are constants, the root DAG's inputs or other
  tasks' outputs; input artifacts are the producer task's output artifacts, read back from MLMD.
- metadata/client.go: a run's root is <pipeline root>/<pipeline name>/<run id>
  (GetPipeline); an output artifact's URI is <run root>/<task>/<salt>/<output>
  (driver/container.go provisionOutputs); an artifact read back for a downstream task has its
  MLMD id as name, its properties and custom properties as metadata and an empty instance
  schema as type (GetOutputArtifactsByExecutionId, OutputArtifact.ToRuntimeArtifact,
  metadata/converter.go toRuntimeArtifact); recording turns metadata into custom properties
  (toMLMDArtifact, StructValueToMLMDValue: numbers as doubles, lists and structs wrapped).
  Output artifacts are named after their output key (driver.go provisionOutputs, KFP 2.15 on).
- driver/container.go: with log publishing the outputs include `executor-logs`
  (system.Artifact); cacheutils/cache.go: the cache key is the input artifact names, input
  parameter values, output specs without URIs, and the container's image and raw command line;
  a hit reuses the earlier execution's output artifacts.
- component/launcher_v2.go: default parameter values added, placeholders substituted
  ({{$}} = the executor input as JSON, artifact URIs and local paths, parameters), the command
  run, then the executor output file read and its artifacts merged into the provisioned ones
  (mergeRuntimeArtifacts) before they are recorded.
- component/importer_launcher.go: an importer task records an artifact for a URI (constant or
  runtime parameter) with the importer's type and metadata, reusing an equal one unless
  reimport is set.
What it does not do: Argo, pods, the launcher's copies of artifacts to and from /s3/...
(TFX reads and writes object storage itself), MLMD's server and the KFP API server.
"""
from __future__ import annotations

import dataclasses
import decimal
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Dict, List, Mapping, Optional

import yaml

RUNNABLE_EXECUTORS = ("container", "importer")
REFUSALS = {  # argocompiler/dag.go's errors.
    "resolver": "resolver executors not implemented",
    "customJob": "custom job executors is Google Cloud only, it's not supported",
}
EXECUTOR_LOGS = "executor-logs"
LOCAL_PATH_PREFIXES = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RefusedPipeline(ValueError):
  """The backend would not turn this spec into a workflow."""


class TaskFailed(RuntimeError):
  pass


@dataclasses.dataclass
class BackendTaskRun:
  name: str
  executor_input: Optional[dict]  # As the command received it; None for importers.
  outputs: Dict[str, int]  # Output artifact name -> artifact id.
  parameters: Dict[str, object]  # Output parameter values.
  cached: bool
  seconds: float


@dataclasses.dataclass
class PipelineRun:
  run_id: str
  run_root: str
  tasks: Dict[str, BackendTaskRun]
  seconds: float


def check_executors(spec: dict) -> None:
  """Fails as the backend's compiler does on an executor it does not run."""
  for name, executor in sorted(spec["deploymentSpec"]["executors"].items()):
    for kind in executor:
      if kind not in RUNNABLE_EXECUTORS:
        reason = REFUSALS.get(kind, f"unknown executor spec type: {kind}")
        raise RefusedPipeline(f"executor {name}: {reason}")


def task_order(tasks: Mapping[str, dict]) -> List[str]:
  """Dependency order (upstream first); ties broken by name, like a deterministic scheduler."""
  upstream = {name: set(task.get("dependentTasks", [])) for name, task in tasks.items()}
  for name, task in tasks.items():
    for section in ("artifacts", "parameters"):
      for spec in task.get("inputs", {}).get(section, {}).values():
        producer = (spec.get("taskOutputArtifact") or spec.get("taskOutputParameter") or {})
        if producer.get("producerTask"):
          upstream[name].add(producer["producerTask"])
  order, done = [], set()
  while len(order) < len(tasks):
    ready = sorted(n for n in tasks if n not in done and upstream[n] <= done)
    if not ready:
      raise RefusedPipeline(f"the DAG has a cycle among {sorted(set(tasks) - done)}")
    order.extend(ready)
    done.update(ready)
  return order


def local_path(uri: str) -> Optional[str]:
  """launcher_v2.go LocalPathForURI: where the launcher would mount an artifact."""
  for prefix, local in LOCAL_PATH_PREFIXES.items():
    if uri.startswith(prefix):
      return local + uri[len(prefix):]
  return None


def join_uri(root: str, *parts: str) -> str:
  """metadata.GenerateOutputURI: the root keeps its scheme, the parts are joined by '/'."""
  return "/".join([root.rstrip("/")] + [p.strip("/") for p in parts if p])


def _schema_title(artifact_type: dict) -> str:
  if "schemaTitle" in artifact_type:
    return artifact_type["schemaTitle"]
  return (yaml.safe_load(artifact_type.get("instanceSchema") or "") or {}).get("title", "")


def _to_mlmd_value(value):
  """StructValueToMLMDValue: how a metadata value is stored as an MLMD custom property."""
  if isinstance(value, bool):
    return {"int_value": int(value)}
  if isinstance(value, (int, float)):
    return {"double_value": float(value)}
  if isinstance(value, str):
    return {"string_value": value}
  if isinstance(value, list):
    return {"struct_value": {"list": value}}
  if isinstance(value, dict):
    return {"struct_value": {"struct": value}}
  raise TaskFailed(f"unknown/unsupported value type {type(value).__name__}")


def _from_mlmd_value(value: dict):
  """toRuntimeArtifact: an MLMD value back as a metadata value (ints become numbers)."""
  (kind, inner), = value.items()
  return float(inner) if kind in ("int_value", "double_value") else inner


class Metadata:
  """The few MLMD records the driver needs, kept in one JSON file so runs share them."""

  def __init__(self, path: str):
    self.path = path
    self.data = {"next_id": 1, "artifacts": {}, "executions": {}, "cache": {}}
    if os.path.exists(path):
      with open(path) as f:
        self.data = json.load(f)

  def save(self) -> None:
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      json.dump(self.data, f, indent=1, sort_keys=True)
    os.replace(tmp, self.path)

  def _new_id(self) -> int:
    new_id = self.data["next_id"]
    self.data["next_id"] += 1
    return new_id

  def record_artifact(self, output_name: str, artifact: dict) -> int:
    """RecordArtifact: type from the schema title, metadata as custom properties."""
    custom = {k: _to_mlmd_value(v) for k, v in artifact.get("metadata", {}).items()}
    custom.setdefault("display_name", {"string_value": output_name})
    artifact_id = self._new_id()
    self.data["artifacts"][str(artifact_id)] = {
        "uri": artifact["uri"], "type": _schema_title(artifact["type"]),
        "custom_properties": custom, "state": "LIVE"}
    return artifact_id

  def artifact(self, artifact_id: int) -> dict:
    return self.data["artifacts"][str(artifact_id)]

  def runtime_artifact(self, artifact_id: int) -> dict:
    """An upstream output as the driver hands it to a downstream task."""
    stored = self.artifact(artifact_id)
    return {"name": str(artifact_id), "uri": stored["uri"], "type": {"instanceSchema": ""},
            "metadata": {k: _from_mlmd_value(v)
                         for k, v in stored["custom_properties"].items()}}

  def find_artifact(self, uri: str, type_title: str, metadata: dict) -> Optional[int]:
    """FindMatchedArtifact: same type, state, URI and custom properties."""
    wanted = {k: _to_mlmd_value(v) for k, v in metadata.items()}
    for artifact_id, stored in self.data["artifacts"].items():
      if (stored["uri"] == uri and stored["type"] == type_title and
          all(stored["custom_properties"].get(k) == v for k, v in wanted.items())):
        return int(artifact_id)
    return None

  def record_execution(self, run_id: str, task: str, outputs: Dict[str, int],
                       parameters: dict, fingerprint: Optional[str]) -> None:
    """An execution with its output artifacts and parameters; with a fingerprint, a cache
    entry (CreateExecutionCache) that later runs may reuse."""
    execution_id = self._new_id()
    self.data["executions"][str(execution_id)] = {
        "run_id": run_id, "task": task, "outputs": outputs, "parameters": parameters}
    if fingerprint:
      self.data["cache"][fingerprint] = execution_id

  def cached_execution(self, fingerprint: str) -> Optional[dict]:
    execution_id = self.data["cache"].get(fingerprint)
    return None if execution_id is None else self.data["executions"][str(execution_id)]


def _parameter_from_text(text: str, parameter_type: str):
  """metadata.TextToPbValue."""
  if parameter_type == "STRING":
    return text
  if parameter_type in ("NUMBER_INTEGER", "NUMBER_DOUBLE"):
    return float(int(text.strip()) if parameter_type == "NUMBER_INTEGER" else text.strip())
  if parameter_type == "BOOLEAN":
    return text.strip().lower() in ("1", "t", "true")
  return json.loads(text)


def cache_fingerprint(executor_input: dict, container: dict, output_parameter_types: dict) -> str:
  """cacheutils.GenerateCacheKey + GenerateFingerPrint, over the same fields."""
  outputs = executor_input["outputs"]
  key = {
      "inputArtifactNames": {
          name: {"artifactNames": [a["name"] for a in artifacts["artifacts"]]}
          for name, artifacts in executor_input["inputs"].get("artifacts", {}).items()},
      "inputParameterValues": executor_input["inputs"].get("parameterValues", {}),
      "outputArtifactsSpec": {
          name: {k: v for k, v in artifacts["artifacts"][0].items() if k != "uri"}
          for name, artifacts in outputs.get("artifacts", {}).items() if artifacts["artifacts"]},
      "outputParametersSpec": {name: output_parameter_types[name]
                               for name in outputs.get("parameters", {})},
      "containerSpec": {"image": container["image"],
                        "cmdArgs": container.get("command", []) + container.get("args", [])},
  }
  return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


EXECUTOR_INPUT_MAPS = ("artifacts", "parameters", "parameterValues")


def _protojson_numbers(value):
  """A JSON value as protojson.Marshal writes it: an integral number without a fraction."""
  if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
    return int(value)
  if isinstance(value, dict):
    return {key: _protojson_numbers(inner) for key, inner in value.items()}
  if isinstance(value, list):
    return [_protojson_numbers(inner) for inner in value]
  return value


def protojson(executor_input: dict) -> dict:
  """The executor input as protojson.Marshal writes it: empty maps of its inputs and outputs
  left out, integral numbers without a fraction."""
  return _protojson_numbers({
      side: {key: value for key, value in fields.items()
             if not (key in EXECUTOR_INPUT_MAPS and value == {})}
      for side, fields in executor_input.items()})


def placeholders(executor_input: dict) -> Dict[str, str]:
  """launcher_v2.go getPlaceholders; {{$}} is the executor input as protojson.Marshal writes
  it (launcher_v2.go, where the command line is compiled)."""
  values = {"{{$}}": json.dumps(protojson(executor_input), separators=(",", ":"))}
  for name, artifacts in executor_input["inputs"].get("artifacts", {}).items():
    if artifacts["artifacts"]:
      uri = artifacts["artifacts"][0]["uri"]
      values[f"{{{{$.inputs.artifacts['{name}'].uri}}}}"] = uri
      if local_path(uri):
        values[f"{{{{$.inputs.artifacts['{name}'].path}}}}"] = local_path(uri)
  for name, artifacts in executor_input["outputs"].get("artifacts", {}).items():
    uri = artifacts["artifacts"][0]["uri"]
    values[f"{{{{$.outputs.artifacts['{name}'].uri}}}}"] = uri
    values[f"{{{{$.outputs.artifacts['{name}'].path}}}}"] = local_path(uri) or ""
  for name, value in executor_input["inputs"].get("parameterValues", {}).items():
    if isinstance(value, bool):
      text = "true" if value else "false"
    elif isinstance(value, float):  # strconv.FormatFloat(v, 'f', -1, 64): no exponent.
      text = format(decimal.Decimal(repr(value)).normalize(), "f")
    elif isinstance(value, (list, dict)):
      text = json.dumps(value, separators=(",", ":"))
    else:
      text = str(value)
    values[f"{{{{$.inputs.parameters['{name}']}}}}"] = text
  for name, parameter in executor_input["outputs"].get("parameters", {}).items():
    values[f"{{{{$.outputs.parameters['{name}'].output_file}}}}"] = parameter["outputFile"]
  return values


def substitute(text: str, values: Mapping[str, str]) -> str:
  for placeholder, replacement in values.items():
    text = text.replace(placeholder, replacement)
  return text


class Harness:
  """Runs a compiled pipeline spec; state (the tiny MLMD, logs) lives under workdir."""

  def __init__(self, spec_path: str, workdir: str, python: str = sys.executable,
               env: Optional[Mapping[str, str]] = None, task_timeout: float = 900,
               publish_logs: bool = True):
    with open(spec_path) as f:
      self.spec = yaml.safe_load(f)
    check_executors(self.spec)
    self.workdir = workdir
    os.makedirs(workdir, exist_ok=True)
    self.python = python
    self.env = dict(os.environ, **(env or {}))
    self.task_timeout = task_timeout
    self.publish_logs = publish_logs
    self.metadata = Metadata(os.path.join(workdir, "mlmd.json"))

  def run(self, parameters: Optional[Mapping[str, object]] = None, run_id: Optional[str] = None,
          pipeline_root: Optional[str] = None, enable_caching: bool = True) -> PipelineRun:
    start = time.monotonic()
    run_id = run_id or str(uuid.uuid4())
    root_parameters = self._root_parameters(parameters or {})
    pipeline_name = self.spec["pipelineInfo"]["name"]
    run_root = join_uri(pipeline_root or self.spec["defaultPipelineRoot"], pipeline_name, run_id)
    tasks = self.spec["root"]["dag"]["tasks"]
    done: Dict[str, BackendTaskRun] = {}
    for name in task_order(tasks):
      done[name] = self._run_task(run_id, run_root, name, tasks[name], root_parameters, done,
                                  enable_caching)
    return PipelineRun(run_id, run_root, done, time.monotonic() - start)

  def _root_parameters(self, values: Mapping[str, object]) -> dict:
    definitions = self.spec["root"].get("inputDefinitions", {}).get("parameters", {})
    unknown = sorted(set(values) - set(definitions))
    if unknown:
      raise ValueError(f"unknown runtime parameter(s) {unknown}; the pipeline has "
                       f"{sorted(definitions)}")
    resolved = {}
    for name, definition in definitions.items():
      if name in values:
        resolved[name] = values[name]
      elif "defaultValue" in definition:
        resolved[name] = definition["defaultValue"]
      elif not definition.get("isOptional"):
        raise ValueError(f"runtime parameter {name!r} is required")
    return resolved

  def _inputs(self, task: dict, root_parameters: dict, done: Dict[str, BackendTaskRun]) -> dict:
    """driver/resolve.go: the task's parameter values and input artifacts."""
    parameters, artifacts = {}, {}
    for name, spec in task.get("inputs", {}).get("parameters", {}).items():
      if "runtimeValue" in spec:
        parameters[name] = spec["runtimeValue"]["constant"]
      elif "componentInputParameter" in spec:
        parameters[name] = root_parameters[spec["componentInputParameter"]]
      elif "taskOutputParameter" in spec:
        source = spec["taskOutputParameter"]
        parameters[name] = done[source["producerTask"]].parameters[source["outputParameterKey"]]
      else:
        raise TaskFailed(f"parameter {name}: unsupported input spec {sorted(spec)}")
    for name, spec in task.get("inputs", {}).get("artifacts", {}).items():
      source = spec.get("taskOutputArtifact")
      if source is None:
        raise TaskFailed(f"artifact {name}: unsupported input spec {sorted(spec)}")
      artifact_id = done[source["producerTask"]].outputs[source["outputArtifactKey"]]
      artifacts[name] = {"artifacts": [self.metadata.runtime_artifact(artifact_id)]}
    return {"parameterValues": parameters, "artifacts": artifacts}

  def _run_task(self, run_id: str, run_root: str, name: str, task: dict, root_parameters: dict,
                done: Dict[str, BackendTaskRun], enable_caching: bool) -> BackendTaskRun:
    start = time.monotonic()
    component = self.spec["components"][task["componentRef"]["name"]]
    executor = self.spec["deploymentSpec"]["executors"][component["executorLabel"]]
    inputs = self._inputs(task, root_parameters, done)
    if "importer" in executor:
      outputs = self._import(executor["importer"], task, component, root_parameters)
      self.metadata.record_execution(run_id, name, outputs, {}, None)
      self.metadata.save()
      return BackendTaskRun(name, None, outputs, {}, False, time.monotonic() - start)

    container = executor["container"]
    task_dir = os.path.join(self.workdir, run_id, name)
    os.makedirs(task_dir, exist_ok=True)
    executor_input = {"inputs": inputs,
                      "outputs": self._provision_outputs(run_root, name, component, task_dir)}
    output_parameter_types = {
        k: v["parameterType"] for k, v in
        component.get("outputDefinitions", {}).get("parameters", {}).items()}
    use_cache = enable_caching and task.get("cachingOptions", {}).get("enableCache", False)
    fingerprint = cache_fingerprint(executor_input, container, output_parameter_types)
    cached = self.metadata.cached_execution(fingerprint) if use_cache else None
    if cached is not None:  # reuseCachedOutputs: the earlier execution's very artifacts.
      self.metadata.record_execution(run_id, name, cached["outputs"], cached["parameters"], None)
      self.metadata.save()
      return BackendTaskRun(name, executor_input, dict(cached["outputs"]),
                            dict(cached["parameters"]), True, time.monotonic() - start)

    with_defaults = json.loads(json.dumps(executor_input))
    for param, definition in component.get("inputDefinitions", {}).get("parameters", {}).items():
      if param not in with_defaults["inputs"]["parameterValues"] and "defaultValue" in definition:
        with_defaults["inputs"]["parameterValues"][param] = definition["defaultValue"]
    values = placeholders(with_defaults)
    command = [substitute(part, values) for part in container["command"] + container["args"]]
    if command[0] == "python":  # The image's interpreter is this project's environment's.
      command[0] = self.python
    log_path = os.path.join(task_dir, "log.txt")
    with open(log_path, "w") as log:
      try:
        result = subprocess.run(command, cwd=PROJECT_DIR, env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, timeout=self.task_timeout)
      except subprocess.TimeoutExpired as error:
        raise TaskFailed(f"task {name} timed out after {self.task_timeout} s; log: "
                         f"{log_path}") from error
    if result.returncode != 0:
      with open(log_path) as f:
        tail = f.read()[-4000:]
      raise TaskFailed(f"task {name} failed (exit {result.returncode}); log: {log_path}\n{tail}")

    executor_output = {}
    output_file = executor_input["outputs"]["outputFile"]
    if os.path.exists(output_file):
      with open(output_file) as f:
        executor_output = json.load(f)
    outputs = {}
    for output_name, artifacts in executor_input["outputs"]["artifacts"].items():
      artifact = dict(artifacts["artifacts"][0])  # The executor input stays as it was given.
      produced = executor_output.get("artifacts", {}).get(output_name, {}).get("artifacts", [])
      if produced:  # mergeRuntimeArtifacts.
        artifact["uri"] = produced[0].get("uri") or artifact["uri"]
        artifact["metadata"] = {**artifact.get("metadata", {}),
                                **produced[0].get("metadata", {})}
      outputs[output_name] = self.metadata.record_artifact(output_name, artifact)
    parameters = dict(executor_output.get("parameterValues", {}))
    for param, spec in executor_input["outputs"]["parameters"].items():
      if param not in parameters:  # collectOutputParameters: the file the command wrote.
        with open(spec["outputFile"]) as f:
          parameters[param] = _parameter_from_text(f.read(), output_parameter_types[param])
    self.metadata.record_execution(run_id, name, outputs, parameters,
                                   fingerprint if use_cache else None)
    self.metadata.save()
    return BackendTaskRun(name, executor_input, outputs, parameters, False,
                          time.monotonic() - start)

  def _provision_outputs(self, run_root: str, task_name: str, component: dict,
                         task_dir: str) -> dict:
    """driver/driver.go provisionOutputs (KFP 2.15 on): each output named after its key (for
    the SDK's Pythonic artifacts; before 2.15 it had no name), URIs under the task root. The
    executor output file is output_metadata.json in the task root's local path
    (/s3/<bucket>/...), or /tmp/kfp_outputs/ in its own pod before 2.15; tasks here share one
    machine and cannot write /s3/, so each gets its own directory."""
    definitions = dict(component.get("outputDefinitions", {}).get("artifacts", {}))
    if self.publish_logs:
      definitions[EXECUTOR_LOGS] = {"artifactType": {"schemaTitle": "system.Artifact"}}
    salt = str(uuid.uuid4())
    artifacts = {
        name: {"artifacts": [{"name": name, "uri": join_uri(run_root, task_name, salt, name),
                              "type": definition["artifactType"],
                              **({"metadata": definition["metadata"]}
                                 if "metadata" in definition else {})}]}
        for name, definition in definitions.items()}
    parameters = {name: {"outputFile": os.path.join(task_dir, "outputs", name)}
                  for name in component.get("outputDefinitions", {}).get("parameters", {})}
    return {"artifacts": artifacts, "parameters": parameters,
            "outputFile": os.path.join(task_dir, "kfp_outputs", "output_metadata.json")}

  def _import(self, importer: dict, task: dict, component: dict,
              root_parameters: dict) -> Dict[str, int]:
    """importer_launcher.go: one artifact for the URI, reused unless reimport is set."""
    uri_spec = importer["artifactUri"]
    if "constant" in uri_spec:
      uri = uri_spec["constant"]
    else:
      task_input = task["inputs"]["parameters"][uri_spec["runtimeParameter"]]
      uri = root_parameters[task_input["componentInputParameter"]]
    if not uri:
      raise TaskFailed("empty Artifact URI constant value")
    (output_name,) = component["outputDefinitions"]["artifacts"]
    artifact = {"uri": uri, "type": importer["typeSchema"],
                "metadata": importer.get("metadata", {})}
    existing = None if importer.get("reimport") else self.metadata.find_artifact(
        uri, _schema_title(importer["typeSchema"]), artifact["metadata"])
    return {output_name: existing or self.metadata.record_artifact(output_name, artifact)}


# `make kubeflow-local` and the tests: the tiny e2e config, compiled for kfp with everything on
# s3:// of a local S3 server.
IMAGE = "localhost/wrn-pipeline:harness"  # Never pulled: the harness runs commands here.
BUCKET = "wrn-kfp-harness"
PIPELINE_NAME = "wrn-kfp-harness"


def compile_for_s3(server, package_dir: str, flags: List[str]):
  """The pipeline compiled for kfp with output_dir and schema in a bucket of `server`
  (testing/s3_server.py); returns (config, CompiledPipeline)."""
  from kubeflow import compiler
  from pipeline.config import DEFAULT_SCHEMA_PATH, from_flags, from_preset
  client = server.client()
  if BUCKET not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
    server.create_bucket(BUCKET)
  client.upload_file(DEFAULT_SCHEMA_PATH, BUCKET, "schema/schema.pbtxt")
  config = from_flags([f"--image={IMAGE}", f"--output_dir=s3://{BUCKET}/out",
                       f"--schema_path=s3://{BUCKET}/schema/schema.pbtxt",
                       f"--pipeline_name={PIPELINE_NAME}", "--beam_running_mode=in_memory",
                       *flags], base=from_preset("kubeflow"))
  return config, compiler.compile_pipeline(config, package_dir)


def pushed_versions(server, serving_dir: str) -> List[str]:
  """Version directories under an s3:// serving directory that hold a SavedModel."""
  bucket, _, prefix = serving_dir[len("s3://"):].partition("/")
  pages = server.client().get_paginator("list_objects_v2").paginate(
      Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
  keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
  return sorted({key[len(prefix):].strip("/").split("/")[0] for key in keys
                 if key.endswith("/saved_model.pb") and
                 key[len(prefix):].strip("/").count("/") == 1},
                key=lambda version: (len(version), version))


def download(server, uri: str, local_dir: str) -> None:
  bucket, _, prefix = uri[len("s3://"):].partition("/")
  client = server.client()
  for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    for item in page.get("Contents", []):
      target = os.path.join(local_dir, os.path.relpath(item["Key"], prefix))
      if not item["Key"].endswith("/"):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        client.download_file(bucket, item["Key"], target)


ORCHESTRATORS = ("harness", "kfp.local")


def _option(argv: List[str], name: str, default: str) -> str:
  return next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), default)


def _run_on_kfp_local(spec_path: str, pipeline_root: str, env: Mapping[str, str]) -> None:
  """`python -m kubeflow local-run` on the spec, as a user runs it (it prints each task's log,
  then their times and the run directory); raises TaskFailed if it fails."""
  result = subprocess.run(
      [sys.executable, "-m", "kubeflow", "local-run", f"--package={spec_path}",
       "--runner=subprocess", f"--pipeline_root={pipeline_root}"],
      cwd=PROJECT_DIR, env=dict(os.environ, **env))
  if result.returncode != 0:
    raise TaskFailed(f"python -m kubeflow local-run exited with {result.returncode}")


def main(argv: List[str]) -> int:
  """One run of the compiled tiny pipeline on a local S3 server, by this harness or by the KFP
  SDK's kfp.local (--orchestrator=kfp.local); prints where the model went."""
  from testing.tiny_config import SMALL_MODEL
  from testing.s3_server import S3Server
  orchestrator = _option(argv, "orchestrator", "harness")
  if orchestrator not in ORCHESTRATORS:
    print(f"error: Invalid --orchestrator {orchestrator!r}: expected one of "
          f"{list(ORCHESTRATORS)}.", file=sys.stderr)
    return 2
  default_workdir = "kubeflow-local" if orchestrator == "harness" else "kubeflow-local-kfp"
  workdir = os.path.abspath(_option(argv, "workdir", os.path.join("outputs", default_workdir)))
  flags = [a for a in argv if not a.startswith(("--workdir=", "--orchestrator="))]
  start = time.monotonic()
  with S3Server() as server:
    config, compiled = compile_for_s3(server, os.path.join(workdir, "package"),
                                      SMALL_MODEL + flags)
    print(f"compiled for kubeflow_target=kfp: {compiled.spec_path}", flush=True)
    try:
      if orchestrator == "harness":
        harness = Harness(compiled.spec_path, os.path.join(workdir, "harness"),
                          env=server.environ())
        run = harness.run()
        for task in run.tasks.values():
          print(f"  {task.name:<24} {task.seconds:6.1f} s{' (cached)' if task.cached else ''}")
        print(f"harness run {run.run_id}: {len(run.tasks)} tasks in {run.seconds:.0f} s")
      else:
        _run_on_kfp_local(compiled.spec_path, os.path.join(workdir, "pipeline_root"),
                          server.environ())
    except TaskFailed as error:
      print(f"error: {error}", file=sys.stderr)
      return 1
    print(f"with compile and S3 server: {time.monotonic() - start:.0f} s")
    versions = pushed_versions(server, config.serving_model_dir)
    if not versions:
      print("pushed model:   none (the Evaluator did not bless the candidate)")
      return 1
    pushed = f"{config.serving_model_dir}/{versions[-1]}"
    local_copy = os.path.join(workdir, "pushed_model", versions[-1])
    download(server, pushed, local_copy)
    print(f"pushed model:   {pushed} (on the test S3 server, gone with it)\n"
          f"local copy:     {local_copy}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
