"""The Kubeflow runner's parts of the graph (pipeline.pipeline.RunnerParts): the input base and
each Trainer's config as runtime parameters, the schema inside the image, Vertex AI's Trainer or
a TrainJob launcher where the pools ask for one, KFP's own metadata store."""
import json
from typing import Any

from tfx import v1 as tfx

from kubeflow import trainjob_launcher
from kubeflow.parameters import DATA_ROOT_PARAMETER, SPAN_PARAMETER, trainer_config_parameter
from kubeflow.trainjob import NodePlacement
from kubeflow.cluster_config import TRAINER_STEP, image_path, step_pod
from pipeline.pipeline import TRAINER_RUN_FN, RunnerParts, tfrecord_input_base

Parameter = tfx.dsl.experimental.RuntimeParameter


def cluster_parts(config) -> RunnerParts:
  """The graph's runner parts in the cluster `config.kubeflow` describes."""
  kubeflow = config.kubeflow

  def make_trainer(trial: int, custom_config: dict, **inputs: Any):
    """TFX's Trainer, Vertex AI's when the config asks for worker pools, or the TrainJob
    launcher for several replicas on an open-source cluster, whose
    custom_config is the runtime parameter `trainer_config` (`trainer_config_trial_<i>` for
    the other trials), defaulting to this trial's config."""
    trainer_class = tfx.components.Trainer
    if kubeflow.uses_vertex_training:
      trainer_class = tfx.extensions.google_cloud_ai_platform.Trainer
      custom_config = {**custom_config, **vertex_training_config(kubeflow)}
    elif kubeflow.uses_trainjob:
      trainer_class = trainjob_launcher.Trainer
      custom_config = {**custom_config, **trainjob_launcher.trainjob_settings(
          kubeflow.replica_count, kubeflow.image, trainjob_node_placement(config))}
    parameter = Parameter(name=trainer_config_parameter(trial), ptype=str,
                          default=json.dumps(custom_config, sort_keys=True))
    return trainer_class(run_fn=TRAINER_RUN_FN, custom_config=parameter, **inputs)

  return RunnerParts(
      schema_file=image_path(config.data.schema_path),
      tfrecord_input_base=Parameter(
          name=DATA_ROOT_PARAMETER, ptype=str,
          default=config.data.tfrecord_dir and tfrecord_input_base(config.data.tfrecord_dir)),
      span=(Parameter(name=SPAN_PARAMETER, ptype=str, default=config.data.span)
            if config.data.is_span_pattern else ""),
      tfrecord_splits=("train", "eval"),  # A test split is only scored locally.
      make_trainer=make_trainer, metadata_connection_config=None,
      beam_pipeline_args=config.beam_pipeline_args(), beam_step_args=config.beam_step_args)


def vertex_training_config(kubeflow) -> dict:
  """The Vertex Trainer's keys: its CustomJob's worker pools, each running the pipeline image
  (which calls run_fn)."""
  vertex = tfx.extensions.google_cloud_ai_platform
  return {vertex.ENABLE_VERTEX_KEY: True, vertex.VERTEX_REGION_KEY: kubeflow.vertex_region,
          vertex.TRAINING_ARGS_KEY: {"project": kubeflow.vertex_project,
                                     "job_spec": {"worker_pool_specs":
                                                  kubeflow.worker_pool_specs()}}}


def trainjob_node_placement(config) -> NodePlacement:
  """What each TrainJob node's pod gets besides image and command: the Trainer step's pod
  (cluster_config.step_pod of a training node): its resources, node selector, tolerations,
  plain env and the Secret keys mapped into its environment."""
  pod = step_pod(config, TRAINER_STEP, training_node=True)
  quantities = {name: value for name, value in (("cpu", pod.resources.cpu),
                                                 ("memory", pod.resources.memory)) if value}
  limits = dict(quantities)
  if pod.resources.accelerator_count:
    limits[pod.resources.accelerator_type] = str(pod.resources.accelerator_count)
  resources = {key: value for key, value in (("requests", quantities), ("limits", limits))
               if value}
  env = tuple({"name": name, "value": value} for name, value in pod.env) + tuple(
      {"name": variable, "valueFrom": {"secretKeyRef": {"name": pod.secret_name, "key": key}}}
      for key, variable in pod.secret_env)
  tolerations = tuple({key: value for key, value in (
      ("key", toleration.key), ("operator", toleration.operator), ("value", toleration.value),
      ("effect", toleration.effect)) if value} for toleration in pod.tolerations)
  return NodePlacement(resources=resources, node_selector=dict(pod.node_selector),
                       tolerations=tolerations, env=env)
