"""Each step's pod in the compiled spec: container resources, and for an open-source KFP server
the Kubernetes platform section TFX does not write (docs/kubeflow.md, "Pods").
"""
from typing import Dict, Iterator, Tuple

from google.protobuf import json_format
from kfp.compiler import pipeline_spec_builder
from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2
from kfp.pipeline_spec import pipeline_spec_pb2

from kubeflow.cluster_config import (PodResources, StepPod, cpu_cores, memory_bytes, step_kind,
                                     step_pod)

ResourceSpec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec
KUBERNETES = "kubernetes"  # The platform key the backend reads (apiserver v2_template.go).
GB = 10**9  # The unit of memory in the spec (kfp.dsl.constants._G; the driver appends "G").


def resource_spec(resources: PodResources) -> ResourceSpec:
  """The container resources of a pod: CPU and memory requested and limited alike."""
  spec = ResourceSpec()
  if resources.cpu:
    spec.cpu_limit = spec.cpu_request = cpu_cores(resources.cpu)
  if resources.memory:
    spec.memory_limit = spec.memory_request = memory_bytes(resources.memory) / GB
  if resources.accelerator_count:
    spec.accelerator.type = resources.accelerator_type
    spec.accelerator.count = resources.accelerator_count
  return spec


def executor_config(pod: StepPod) -> k8s_pb2.KubernetesExecutorConfig:
  """The pod's Kubernetes settings as kfp-kubernetes writes them (use_secret_as_env,
  add_node_selector, add_toleration, set_image_pull_secrets)."""
  config = k8s_pb2.KubernetesExecutorConfig()
  if pod.secret_env:
    config.secret_as_env.append(k8s_pb2.SecretAsEnv(
        secret_name=pod.secret_name,
        key_to_env=[k8s_pb2.SecretAsEnv.SecretKeyToEnvMap(secret_key=key, env_var=variable)
                    for key, variable in pod.secret_env]))
  for label, value in pod.node_selector:
    config.node_selector.labels[label] = value
  for toleration in pod.tolerations:
    config.tolerations.append(k8s_pb2.Toleration(
        key=toleration.key, operator=toleration.operator, value=toleration.value,
        effect=toleration.effect))
  for name in pod.image_pull_secrets:
    config.image_pull_secret.append(k8s_pb2.ImagePullSecret(secret_name=name))
  return config


def _container_steps(spec: dict) -> Iterator[Tuple[str, str, dict]]:
  """(component name, executor label, container spec) of every container executor; importers
  have no pod of their own."""
  executors = spec["deploymentSpec"]["executors"]
  for name, component in sorted(spec["components"].items()):
    label = component["executorLabel"]
    if "container" in executors[label]:
      yield name, label, executors[label]["container"]


def platform_spec(config, spec: dict) -> Dict[str, dict]:
  """The spec's platform section (the YAML's second document) for config's pods; {} when no
  pod has a Kubernetes setting."""
  platform = pipeline_spec_pb2.PlatformSpec()
  for name, label, _ in _container_steps(spec):
    executor = executor_config(step_pod(config, step_kind(name)))
    if executor.ByteSize():
      pipeline_spec_builder.merge_platform_specs(
          platform, pipeline_spec_builder.platform_config_to_platform_spec(
              {KUBERNETES: json_format.MessageToDict(executor)}, label))
  return json_format.MessageToDict(platform)


def set_container_env(config, spec: dict) -> None:
  """Each container's `env`, in place: the pod's plain settings (the driver copies them)."""
  for name, _, container in _container_steps(spec):
    env = step_pod(config, step_kind(name)).env
    if env:
      container["env"] = [{"name": variable, "value": value} for variable, value in env]
