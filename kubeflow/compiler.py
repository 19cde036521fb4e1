"""Compiles the same create_pipeline as the local runner, with the cluster's parts, into a KFP v2
PipelineJob (`<name>.json`, for Vertex AI) and pipeline spec (`<name>.yaml`, for a KFP server),
adapted to what an open-source backend runs (docs/kubeflow.md says what and why)."""
import dataclasses
import json
import os
from typing import Dict

import yaml
from tfx import v1 as tfx
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from kubeflow import kfp_entrypoint, platform
from kubeflow.cluster import cluster_parts
from kubeflow.cluster_config import ClusterConfig, step_kind, step_pod
from components.span_check import STEP_ID as SPAN_CHECK_ID
from pipeline.pipeline import DRIFT_BASELINE_MODEL_ID, WARM_START_MODEL_ID, create_pipeline

# What backend/src/v2/compiler/argocompiler/dag.go (kubeflow/pipelines) turns into a workflow;
# it fails the whole pipeline on a resolver ("not implemented") or customJob ("Google Cloud
# only") executor.
OPEN_SOURCE_EXECUTOR_KINDS = ("container", "importer")
# Tasks whose result depends on state outside their inputs (the serving directory, the run).
UNCACHEABLE_TASKS = ("ProductionModel", WARM_START_MODEL_ID, DRIFT_BASELINE_MODEL_ID,
                     SPAN_CHECK_ID)
# Query-based, so TFX compiles no driver hook for it; its driver (span pattern, window,
# fingerprint) runs in the entrypoint as the file-based ExampleGen's does.
IMAGE_FOLDER_EXAMPLE_GEN = "ImageDatasetExampleGen"


@dataclasses.dataclass(frozen=True)
class CompiledPipeline:
  job_path: str  # PipelineJob JSON.
  spec_path: str  # PipelineSpec YAML, for `kfp.Client` uploads.


def runtime_parameter_defaults(pipeline: tfx.dsl.Pipeline) -> Dict[str, object]:
  """Every runtime parameter of the pipeline's components, with its default."""
  defaults = {}
  for component in pipeline.components:
    for value in component.exec_properties.values():
      if isinstance(value, tfx.dsl.experimental.RuntimeParameter):
        defaults[value.name] = value.default
  return defaults


def pipeline_job(config: ClusterConfig) -> dict:
  """The PipelineJob of this config, as a dict."""
  pipeline = create_pipeline(config, cluster_parts(config))
  for component in pipeline.components:
    resources = step_pod(config, step_kind(component.id)).resources
    if resources:
      component.with_platform_config(platform.resource_spec(resources))
  defaults = runtime_parameter_defaults(pipeline)
  runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
      kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
          display_name=config.runner.pipeline_name, default_image=config.kubeflow.image,
          use_pipeline_spec_2_1=True))
  job = runner.run(pipeline, parameter_values=defaults, write_out=False)
  spec = job["pipelineSpec"]
  # Without these, a KFP server would write to its own default root and make every parameter
  # mandatory at each run: TFX records them in the job's runtime config only.
  spec["defaultPipelineRoot"] = config.runner.pipeline_root
  for name, default in defaults.items():
    parameter = spec["root"]["inputDefinitions"]["parameters"][name]
    parameter.update(defaultValue=default, isOptional=True)
  # Its output depends on the serving directory, which KFP's cache key cannot see; locally a
  # driver keys the cache on the production version, but drivers do not run on Kubeflow.
  # An image folder's listing is fingerprinted by ExampleGen's driver (components/example_gen.py),
  # whose fingerprint cannot reach KFP's cache key: it is read every run.
  folder = (IMAGE_FOLDER_EXAMPLE_GEN,) if config.data.dataset == "image_dir" else ()
  for task_name in UNCACHEABLE_TASKS + folder:
    if task_name in spec["root"]["dag"]["tasks"]:
      spec["root"]["dag"]["tasks"][task_name]["cachingOptions"] = {"enableCache": False}
  if config.kubeflow.kubeflow_target == "kfp":
    adapt_to_open_source_kfp(spec, image_folder=config.data.dataset == "image_dir")
    platform.set_container_env(config, spec)
  else:
    start_report_types_through_entrypoint(spec)
  return job


def _artifact_types(component: dict) -> Dict[str, Dict[str, str]]:
  """{"input": {name: schema title}, "output": {...}} of a compiled component."""
  return {direction: {name: artifact_title(definition["artifactType"])
                      for name, definition in
                      component.get(f"{direction}Definitions", {}).get("artifacts", {}).items()}
          for direction in ("input", "output")}


def _through_entrypoint(container: dict, types: Dict[str, Dict[str, str]]) -> None:
  container["command"] = list(kfp_entrypoint.COMMAND)
  container["args"] = [kfp_entrypoint.ARTIFACT_TYPES_FLAG, json.dumps(types, sort_keys=True),
                       *container["args"]]


def start_report_types_through_entrypoint(spec: dict) -> None:
  """Vertex runs TFX's entrypoint as compiled, which imports a custom type's schema title as a
  class path; the run report's titles (system.HTML, system.Markdown: what the KFP UI renders)
  are none, so the steps that use them start through kubeflow.kfp_entrypoint, which maps them."""
  executors = spec["deploymentSpec"]["executors"]
  for component in spec["components"].values():
    types = _artifact_types(component)
    titles = {title for by_name in types.values() for title in by_name.values()}
    container = executors[component["executorLabel"]].get("container")
    if container is not None and titles & set(kfp_entrypoint.REPORT_TYPE_CLASSES):
      _through_entrypoint(container, types)


def adapt_to_open_source_kfp(spec: dict, image_folder: bool = False) -> None:
  """Makes a TFX-compiled spec runnable by an open-source KFP v2 backend, in place; raises
  naming any executor that backend would refuse. image_folder: the ExampleGen reads an image
  folder, whose driver runs as the file-based ExampleGen's does."""
  executors = spec["deploymentSpec"]["executors"]
  refused = sorted(f"{name} ({kind})" for name, executor in executors.items()
                   for kind in executor if kind not in OPEN_SOURCE_EXECUTOR_KINDS)
  if refused:
    raise ValueError(
        f"kubeflow_target=kfp: executor(s) {', '.join(refused)} cannot run on an open-source "
        f"Kubeflow Pipelines server, which runs only {OPEN_SOURCE_EXECUTOR_KINDS} executors; "
        "compile with --kubeflow_target=vertex for Vertex AI Pipelines.")
  uncached = set()
  for component_name, component in spec["components"].items():
    container = executors[component["executorLabel"]].get("container")
    if container is None:
      continue
    if "lifecycle" in container or (image_folder and _is_image_folder_example_gen(
        component_name, container)):
      # The ExampleGen's driver (span, version, input fingerprint: TFX's file-based one, or
      # the image folder's) runs in the entrypoint instead; the fingerprint cannot reach KFP's
      # cache key, so no caching.
      container["args"] = [kfp_entrypoint.EXAMPLE_GEN_DRIVER_FLAG, *container["args"]]
      container.pop("lifecycle", None)
      uncached.add(component_name)
    _through_entrypoint(container, _artifact_types(component))
  for task in spec["root"]["dag"]["tasks"].values():
    if task["componentRef"]["name"] in uncached:
      task["cachingOptions"] = {"enableCache": False}


def _is_image_folder_example_gen(component_name: str, container: dict) -> bool:
  args = container.get("args", [])
  return (component_name.endswith(IMAGE_FOLDER_EXAMPLE_GEN) and "--executor_class_path" in args
          and args[args.index("--executor_class_path") + 1].startswith("components.example_gen."))


def artifact_title(artifact_type: dict) -> str:
  """The schema title of a spec's artifact type (TFX writes instance schemas)."""
  if "schemaTitle" in artifact_type:
    return artifact_type["schemaTitle"]
  return yaml.safe_load(artifact_type["instanceSchema"])["title"]


def compile_pipeline(config: ClusterConfig, package_dir: str) -> CompiledPipeline:
  job = pipeline_job(config)
  os.makedirs(package_dir, exist_ok=True)
  base = os.path.join(package_dir, config.runner.pipeline_name)
  compiled = CompiledPipeline(job_path=base + ".json", spec_path=base + ".yaml")
  with open(compiled.job_path, "w") as f:
    json.dump(job, f, indent=2, sort_keys=True)
  documents = [job["pipelineSpec"]]
  if config.kubeflow.kubeflow_target == "kfp":
    platform_section = platform.platform_spec(config, job["pipelineSpec"])
    if platform_section:  # As kfp's write_pipeline_spec_to_file: a second YAML document.
      documents.append(platform_section)
  with open(compiled.spec_path, "w") as f:
    yaml.safe_dump_all(documents, f, sort_keys=True)
  return compiled
