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
- driver/container.go: a task's trigger condition (a CEL expression) is evaluated over its
  resolved inputs (expression/expression.go); false skips the task, and argocompiler/dag.go's
  depends() (`<upstream>.Succeeded`) skips every task downstream of it (kubeflow/conditions.py).
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
- The pod of a container task (`Pod`): driver/driver.go initPodSpecPatch turns the container's
  resources into limits and requests (getPodResource: CPU "%v", memory "%vG" of the spec's
  numbers, accelerator type = count; each parsed by resource.ParseQuantity, an error failing
  the task) and copies the container's env; driver/k8s.go extendPodSpecPatch applies the
  platform section's KubernetesExecutorConfig of the task's executor (the YAML's second
  document, apiserver/template/v2_template.go; unmarshalled by protojson,
  compiler/argocompiler/spec_patch.go): Secret keys as env (no Secret name is an error), node
  selector, tolerations, image pull secrets. The API server then refuses a pod whose resource,
  label or toleration is invalid, and the kubelet does not start one whose Secret or key is
  missing (CreateContainerConfigError). The harness does the same with `secrets`, a stand-in
  for the namespace's Secrets, and gives a task no object-store variable of this machine: its
  settings come from the spec and the Secrets, as in a pod.
What it does not do: Argo, scheduling (node selectors and tolerations are checked, not
matched against nodes; resources are not reserved), the launcher's copies of artifacts to and
from /s3/... (TFX reads and writes object storage itself), MLMD's server and the KFP API server.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import decimal
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from typing import Dict, List, Mapping, Optional, Tuple

import yaml
from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2

from kubeflow import conditions, kube_validation

RUNNABLE_EXECUTORS = ("container", "importer")
REFUSALS = {  # argocompiler/dag.go's errors.
    "resolver": "resolver executors not implemented",
    "customJob": "custom job executors is Google Cloud only, it's not supported",
}
EXECUTOR_LOGS = "executor-logs"
LOCAL_PATH_PREFIXES = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# A pod inherits nothing of this machine: object-store settings come from the spec and Secrets.
HOST_ONLY_VARIABLE_PREFIXES = ("AWS_", "S3_")
# resource.ParseQuantity (k8s.io/apimachinery/pkg/api/resource/quantity.go): a decimal number,
# then a binary or decimal SI suffix or a decimal exponent.
QUANTITY = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
                      r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


class RefusedPipeline(ValueError):
  """The backend would not turn this spec into a workflow."""


class TaskFailed(RuntimeError):
  pass


@dataclasses.dataclass
class Pod:
  """What the driver and the API server make of a container task's pod."""
  limits: Dict[str, str]  # Resource name -> quantity, as the driver prints it.
  requests: Dict[str, str]
  env: Dict[str, str]  # The container spec's variables.
  secret_env: Dict[str, Tuple[str, str]]  # Variable -> (Secret name, key).
  node_selector: Dict[str, str]
  tolerations: List[dict]
  image_pull_secrets: List[str]


@dataclasses.dataclass
class BackendTaskRun:
  name: str
  executor_input: Optional[dict]  # As the command received it; None for importers.
  outputs: Dict[str, int]  # Output artifact name -> artifact id.
  parameters: Dict[str, object]  # Output parameter values.
  cached: bool
  seconds: float
  pod: Optional[Pod] = None  # None for importers.
  skipped: Optional[str] = None  # Why the task did not run: its condition, or a skipped upstream.


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


def load_documents(spec_path: str) -> Tuple[dict, dict]:
  """The pipeline spec and the platform section ({} if none), as the API server splits an
  uploaded YAML (apiserver/template/v2_template.go)."""
  with open(spec_path) as f:
    documents = [d for d in yaml.safe_load_all(f) if d]
  spec, platforms = documents[0], {}
  for document in documents[1:]:
    if "platforms" not in document:
      raise RefusedPipeline(f"unexpected YAML document with keys {sorted(document)}")
    platforms.update(document["platforms"])
  return spec, platforms


def kubernetes_executor_configs(platforms: dict) -> Dict[str, k8s_pb2.KubernetesExecutorConfig]:
  """Each executor's KubernetesExecutorConfig (spec_patch.go: protojson.Unmarshal, which
  refuses an unknown field)."""
  executors = platforms.get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
  configs = {}
  for label, config in executors.items():
    try:
      configs[label] = json_format.ParseDict(config, k8s_pb2.KubernetesExecutorConfig())
    except json_format.ParseError as error:
      raise RefusedPipeline(f"failed to unmarshal kubernetes spec for {label}: {error}") from error
  return configs


def go_float(value: float) -> str:
  """fmt's %v of a float64 (strconv 'g', shortest): %e below 1e-4 or from 1e6 on."""
  number = decimal.Decimal(repr(float(value))).normalize()
  exponent = number.adjusted()
  if -4 <= exponent < 6:
    return format(number, "f")
  digits = "".join(map(str, number.as_tuple().digits))
  mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
  return f"{'-' if value < 0 else ''}{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"


def _quantity(name: str, text: str) -> str:
  if QUANTITY.fullmatch(text) is None:
    raise TaskFailed(f"failed to init podSpecPatch: {name} {text!r}: quantities must match "
                     "the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
  return text


def container_pod(container: dict, config: k8s_pb2.KubernetesExecutorConfig) -> Pod:
  """driver.go initPodSpecPatch and k8s.go extendPodSpecPatch, then the API server's checks;
  raises TaskFailed where the task's pod would not be created."""
  resources = container.get("resources", {})
  limits, requests = {}, {}
  for field, target, resource, unit in (("cpuLimit", limits, "cpu", ""),
                                        ("cpuRequest", requests, "cpu", ""),
                                        ("memoryLimit", limits, "memory", "G"),
                                        ("memoryRequest", requests, "memory", "G")):
    if resources.get(field):
      target[resource] = _quantity(resource, go_float(resources[field]) + unit)
  accelerator = resources.get("accelerator", {})
  if accelerator.get("type") and int(accelerator.get("count", 0)) > 0:
    # An extended resource: a qualified name whose domain is outside kubernetes.io.
    domain, slash, _ = accelerator["type"].partition("/")
    if (not slash or "." not in domain or domain.endswith("kubernetes.io")
        or kube_validation.qualified_name_problems(accelerator["type"])):
      raise TaskFailed(f"Pod is invalid: spec.containers[0].resources.limits"
                       f"[{accelerator['type']}]: must be a standard resource type or fully "
                       "qualified")
    limits[accelerator["type"]] = _quantity(accelerator["type"], str(int(accelerator["count"])))
  secret_env = {}
  for secret in config.secret_as_env:
    if not secret.secret_name:
      raise TaskFailed("missing either SecretName or SecretNameParameter for secret "
                       "environment variable in executor config")
    for key_to_env in secret.key_to_env:
      secret_env[key_to_env.env_var] = (secret.secret_name, key_to_env.secret_key)
  node_selector = dict(config.node_selector.labels)
  for key, value in node_selector.items():
    if kube_validation.qualified_name_problems(key) or kube_validation.label_value_problems(value):
      raise TaskFailed(f"Pod is invalid: spec.nodeSelector: {key}={value!r}: not a label")
  tolerations = []
  for toleration in config.tolerations:
    exists = toleration.operator == "Exists"
    if (toleration.operator not in ("", "Exists", "Equal") or
        toleration.effect not in TOLERATION_EFFECTS or (exists and toleration.value) or
        (toleration.key and kube_validation.qualified_name_problems(toleration.key)) or
        kube_validation.label_value_problems(toleration.value) or
        (not toleration.key and not exists)):
      raise TaskFailed(f"Pod is invalid: spec.tolerations: {json_format.MessageToDict(toleration)}")
    tolerations.append(json_format.MessageToDict(toleration))
  return Pod(limits, requests, {e["name"]: e["value"] for e in container.get("env", [])},
             secret_env, node_selector, tolerations,
             [secret.secret_name for secret in config.image_pull_secret])


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


def without_host_credentials(environ: Mapping[str, str]) -> Dict[str, str]:
  """This machine's environment less its object-storage settings and credentials, which a pod
  gets only from its spec (container env, Secret mapping)."""
  return {name: value for name, value in environ.items()
          if not name.startswith(HOST_ONLY_VARIABLE_PREFIXES)}


class Harness:
  """Runs a compiled pipeline spec; state (the tiny MLMD, logs) lives under workdir."""

  def __init__(self, spec_path: str, workdir: str, python: str = sys.executable,
               env: Optional[Mapping[str, str]] = None,
               secrets: Optional[Mapping[str, Mapping[str, str]]] = None,
               task_timeout: float = 900, publish_logs: bool = True):
    """env: variables every task gets besides the spec's; secrets: the namespace's Secrets
    (name -> key -> value) that the platform section may map into a task's environment."""
    self.spec, platforms = load_documents(spec_path)
    check_executors(self.spec)
    self.executor_configs = kubernetes_executor_configs(platforms)
    self.secrets = secrets or {}
    self.workdir = workdir
    os.makedirs(workdir, exist_ok=True)
    self.python = python
    self.env = without_host_credentials(os.environ)
    self.env.update(env or {})
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
      upstream = conditions.skipped_upstream(tasks[name], [n for n, t in done.items()
                                                           if t.skipped])
      if upstream:  # dag.go depends(): `<upstream>.Succeeded` never holds; nothing runs.
        done[name] = BackendTaskRun(name, None, {}, {}, False, 0.0,
                                    skipped=f"upstream task {upstream} was skipped")
        continue
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
    condition = conditions.task_condition(task)
    if condition:  # container.go: evaluated over the resolved inputs, before anything else.
      try:
        runs = conditions.evaluate(condition, {"inputs": inputs})
      except conditions.ConditionError as error:
        raise TaskFailed(f"task {name}: {error}") from error
      if not runs:
        return BackendTaskRun(name, {"inputs": inputs}, {}, {}, False,
                              time.monotonic() - start, skipped=f"condition {condition} is false")
    if "importer" in executor:
      outputs = self._import(executor["importer"], task, component, root_parameters)
      self.metadata.record_execution(run_id, name, outputs, {}, None)
      self.metadata.save()
      return BackendTaskRun(name, None, outputs, {}, False, time.monotonic() - start)

    container = executor["container"]
    pod = container_pod(container, self.executor_configs.get(
        component["executorLabel"], k8s_pb2.KubernetesExecutorConfig()))
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
                            dict(cached["parameters"]), True, time.monotonic() - start, pod)

    with_defaults = json.loads(json.dumps(executor_input))
    for param, definition in component.get("inputDefinitions", {}).get("parameters", {}).items():
      if param not in with_defaults["inputs"]["parameterValues"] and "defaultValue" in definition:
        with_defaults["inputs"]["parameterValues"][param] = definition["defaultValue"]
    values = placeholders(with_defaults)
    command = [substitute(part, values) for part in container["command"] + container["args"]]
    if command[0] == "python":  # The image's interpreter is this project's environment's.
      command[0] = self.python
    env = dict(self.env, **pod.env, **self._secret_values(name, pod))
    log_path = os.path.join(task_dir, "log.txt")
    with open(log_path, "w") as log:
      try:
        result = subprocess.run(command, cwd=PROJECT_DIR, env=env, stdout=log,
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
                          time.monotonic() - start, pod)

  def _secret_values(self, task: str, pod: Pod) -> Dict[str, str]:
    """The kubelet's secretKeyRef lookups: a missing Secret or key keeps the pod from starting."""
    values = {}
    for variable, (secret_name, key) in pod.secret_env.items():
      if secret_name not in self.secrets:
        raise TaskFailed(f"task {task}: CreateContainerConfigError: secret "
                         f"{secret_name!r} not found")
      if key not in self.secrets[secret_name]:
        raise TaskFailed(f"task {task}: CreateContainerConfigError: couldn't find key {key} "
                         f"in Secret {secret_name}")
      values[variable] = self.secrets[secret_name][key]
    return values

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


def s3_secrets(server) -> Dict[str, Dict[str, str]]:
  """The namespace's Secrets for a spec compiled by compile_for_s3: KFP's own object-store
  Secret (the compile's default credentials_secret) holding `server`'s credentials."""
  from kubeflow.cluster_config import KFP_MINIO_SECRET
  environ = server.environ()
  return {KFP_MINIO_SECRET: {"accesskey": environ["AWS_ACCESS_KEY_ID"],
                             "secretkey": environ["AWS_SECRET_ACCESS_KEY"]}}


def compile_for_s3(server, package_dir: str, flags: List[str],
                   pipeline_name: str = PIPELINE_NAME):
  """The pipeline compiled for kfp with output_dir and schema in a bucket of `server`
  (test_support/s3_server.py), its endpoint and region in every container's environment and its
  credentials from KFP's Secret (s3_secrets); returns (config, CompiledPipeline). Pipelines of
  other names share the bucket but not their pipeline root or serving directory. `flags` replace
  these settings."""
  from configs.flags import over_defaults
  from kubeflow import compiler
  from kubeflow.cluster_config import from_flags
  from pipeline.config import DEFAULT_SCHEMA_PATH
  client = server.client()
  if BUCKET not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
    server.create_bucket(BUCKET)
  client.upload_file(DEFAULT_SCHEMA_PATH, BUCKET, "schema/schema.pbtxt")
  config = from_flags(over_defaults([
      f"--image={IMAGE}", f"--output_dir=s3://{BUCKET}/out", "--dataset=digits",
      f"--schema_path=s3://{BUCKET}/schema/schema.pbtxt", f"--pipeline_name={pipeline_name}",
      "--beam_running_mode=in_memory", f"--s3_endpoint={server.endpoint_url}",
      f"--s3_region={server.environ()['AWS_REGION']}"], flags))
  return config, compiler.compile_pipeline(config, package_dir)


def dated_digits(server, local_dir: str, name: str, dates: Tuple[str, ...]) -> str:
  """The digits as dated spans of an image folder (image_folders.write_digit_spans), one
  span per date, copied to s3://BUCKET/images/<name>/ of `server`; returns the span pattern
  (s3://BUCKET/images/<name>/{YYYY}-{MM}-{DD}) for --image_dir."""
  from test_support import image_folders
  if BUCKET not in {b["Name"] for b in server.client().list_buckets()["Buckets"]}:
    server.create_bucket(BUCKET)
  image_folders.write_digit_spans(local_dir, dates)
  root = f"s3://{BUCKET}/images/{name}"
  upload(server, local_dir, root)
  return f"{root}/{image_folders.DATE_PATTERN}"


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


def upload(server, local_dir: str, uri: str) -> None:
  """Copies a local directory's files under an s3:// URI (download's inverse), as many at a
  time as the client keeps connections (ten)."""
  bucket, _, prefix = uri[len("s3://"):].partition("/")
  client = server.client()
  paths = [os.path.join(root, name) for root, _, names in os.walk(local_dir) for name in names]
  with concurrent.futures.ThreadPoolExecutor(10) as pool:
    list(pool.map(lambda path: client.upload_file(
        path, bucket, f"{prefix}/{os.path.relpath(path, local_dir)}"), paths))


def read_object(server, uri: str) -> bytes:
  """The one object at an s3:// URI (a value artifact's file, such as the run report)."""
  bucket, _, key = uri[len("s3://"):].partition("/")
  return server.client().get_object(Bucket=bucket, Key=key)["Body"].read()


ORCHESTRATORS = ("harness", "kfp.local")


def _option(argv: List[str], name: str, default: str) -> str:
  return next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), default)


def local_output_metadata(task, name: str) -> dict:
  """The metadata a kfp.local task (kubeflow/local_run.py) wrote for its output artifact
  `name` in its executor output file."""
  with open(task.executor_input["outputs"]["outputFile"]) as f:
    (artifact,) = json.load(f)["artifacts"][name]["artifacts"]
  return artifact["metadata"]


# The outputs whose metadata say why a run pushed nothing: (task, output key).
OUTCOME_OUTPUTS = {"decision": ("SpanCheck", "decision"), "blessing": ("Evaluator", "blessing"),
                   "pushed": ("Pusher", "pushed_model")}


def nothing_pushed(decision: Optional[dict], blessing: Optional[dict],
                   pushed: Optional[dict]) -> Tuple[int, str]:
  """(exit status, what to print) for a run that pushed no new version, from the metadata of
  its span decision, blessing and pushed model (None: not produced; numbers as either
  orchestrator hands them back). Nothing new to train on, or the blessed model already serving,
  is a run that did its job: 0. A refused candidate (not blessed, or blocked by the drift check)
  is 1: this command starts from an empty object store, with no model in production, so only
  a candidate that misses the gate's own bounds or drifts is refused, and the check has failed."""
  if decision is not None and not decision.get("train", 1):
    return 0, f"pushed model:   nothing pushed: {decision.get('reason', 'nothing new')}"
  pushed = pushed or {}
  if pushed.get("already_serving"):
    return 0, f"pushed model:   nothing pushed: the blessed model already serves as " \
              f"{pushed['already_serving']}"
  if pushed.get("refused_for_drift"):
    return 1, ("pushed model:   none: the drift check blocked the push (--block_on_drift): "
               + "; ".join(json.loads(pushed["refused_for_drift"])))
  if blessing is not None and not blessing.get("blessed", 0):
    return 1, ("pushed model:   none: the Evaluator did not bless the candidate (the run report "
               "says why)")
  return 1, "pushed model:   none: the run pushed nothing (its task logs say why)"


def _harness_outcome_metadata(harness: "Harness", run: PipelineRun) -> Dict[str, Optional[dict]]:
  found = {}
  for name, (task, key) in OUTCOME_OUTPUTS.items():
    artifact_id = run.tasks[task].outputs.get(key) if task in run.tasks else None
    found[name] = (None if artifact_id is None
                   else harness.metadata.runtime_artifact(artifact_id)["metadata"])
  return found


def _kfp_local_outcome_metadata(pipeline_root: str, spec: dict) -> Dict[str, Optional[dict]]:
  """The same metadata from the newest kfp.local run of `spec` under pipeline_root: each task's
  executor output file, <root>/<pipeline>-<time>/<task root>/executor_output.json, the task root
  named by kfp.local from the task's component name (kfp/local/task_dispatcher.py,
  executor_input_utils.get_local_task_resource_name: the name less a "comp-" prefix's length,
  whichever five characters it starts with)."""
  from kfp.local import executor_input_utils
  runs = sorted((entry.path for entry in os.scandir(pipeline_root) if entry.is_dir()),
                key=os.path.getmtime) if os.path.isdir(pipeline_root) else []
  tasks = spec["root"]["dag"]["tasks"]
  found = {}
  for name, (task, key) in OUTCOME_OUTPUTS.items():
    found[name] = None
    if not runs or task not in tasks:
      continue
    task_root = executor_input_utils.get_local_task_resource_name(
        tasks[task]["componentRef"]["name"])
    path = os.path.join(runs[-1], task_root, "executor_output.json")
    if os.path.exists(path):
      with open(path) as f:
        artifacts = json.load(f).get("artifacts", {}).get(key, {}).get("artifacts", [])
      found[name] = artifacts[0].get("metadata") if artifacts else None
  return found


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
  from configs.flags import over_defaults
  from test_support.tiny_config import SMALL_MODEL
  from test_support.s3_server import S3Server
  from test_support.trainjob_nodes import LocalTrainJobs
  orchestrator = _option(argv, "orchestrator", "harness")
  if orchestrator not in ORCHESTRATORS:
    print(f"error: Invalid --orchestrator {orchestrator!r}: expected one of "
          f"{list(ORCHESTRATORS)}.", file=sys.stderr)
    return 2
  default_workdir = "kubeflow-local" if orchestrator == "harness" else "kubeflow-local-kfp"
  workdir = os.path.abspath(_option(argv, "workdir", os.path.join("outputs", default_workdir)))
  flags = [a for a in argv if not a.startswith(("--workdir=", "--orchestrator="))]
  start = time.monotonic()
  with S3Server() as server, LocalTrainJobs(
      os.path.join(workdir, "trainjobs"), without_host_credentials(os.environ),
      secrets=s3_secrets(server)) as cluster:
    config, compiled = compile_for_s3(server, os.path.join(workdir, "package"),
                                      over_defaults(SMALL_MODEL, flags))
    print(f"compiled for kubeflow_target=kfp: {compiled.spec_path}", flush=True)
    try:
      if orchestrator == "harness":
        # With --replica_count > 1 the Trainer's launcher creates a TrainJob in `cluster`,
        # whose nodes run here (test_support/trainjob_nodes.py).
        harness = Harness(compiled.spec_path, os.path.join(workdir, "harness"),
                          env=cluster.environ(), secrets=s3_secrets(server))
        run = harness.run()
        outcome = _harness_outcome_metadata(harness, run)
        for task in run.tasks.values():
          print(f"  {task.name:<24} {task.seconds:6.1f} s{' (cached)' if task.cached else ''}"
                f"{f' (skipped: {task.skipped})' if task.skipped else ''}")
        print(f"harness run {run.run_id}: {len(run.tasks)} tasks in {run.seconds:.0f} s")
      else:
        pipeline_root = os.path.join(workdir, "pipeline_root")
        _run_on_kfp_local(compiled.spec_path, pipeline_root,
                          dict(server.environ(), **cluster.environ()))
        outcome = _kfp_local_outcome_metadata(pipeline_root,
                                              load_documents(compiled.spec_path)[0])
    except TaskFailed as error:
      print(f"error: {error}", file=sys.stderr)
      return 1
    print(f"with compile and S3 server: {time.monotonic() - start:.0f} s")
    versions = pushed_versions(server, config.runner.serving_model_dir)
    if not versions:
      status, line = nothing_pushed(**outcome)
      print(line, file=sys.stderr if status else sys.stdout)
      return status
    pushed = f"{config.runner.serving_model_dir}/{versions[-1]}"
    local_copy = os.path.join(workdir, "pushed_model", versions[-1])
    download(server, pushed, local_copy)
    print(f"pushed model:   {pushed} (on the test S3 server, gone with it)\n"
          f"local copy:     {local_copy}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
