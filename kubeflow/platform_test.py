"""The pods' part of the spec: quantities converted as the kfp SDK converts them, and the
platform section exactly as the kfp compiler writes the same settings made with kfp-kubernetes."""
import pytest
import yaml
from kfp import compiler as kfp_compiler
from kfp import dsl, kubernetes

from kubeflow import platform
from kubeflow.cluster_config import PodResources, StepPod, Toleration
from kubeflow.cluster_config import from_flags

POD = StepPod(secret_name="wrn-s3", secret_env=(("accesskey", "AWS_ACCESS_KEY_ID"),
                                                ("secretkey", "AWS_SECRET_ACCESS_KEY")),
              node_selector=(("nvidia.com/gpu.present", "true"),),
              tolerations=(Toleration("nvidia.com/gpu", "", "NoSchedule"),
                           Toleration("dedicated", "ml", "")),
              image_pull_secrets=("regcred",))


@pytest.mark.parametrize("cpu, memory", [("500m", "512Mi"), ("8", "32Gi"), ("1.5", "64G")])
def test_quantities_become_the_numbers_kfps_task_setters_write(cpu, memory):
  sdk = dsl.PipelineTask.__new__(dsl.PipelineTask)  # Its converters read no task state.
  expected_cpu = sdk._validate_cpu_request_limit(cpu)
  expected_memory = sdk._validate_memory_request_limit(memory)
  spec = platform.resource_spec(PodResources(cpu, memory, "nvidia.com/gpu", 2))
  assert spec.cpu_limit == spec.cpu_request == pytest.approx(expected_cpu)
  assert spec.memory_limit == spec.memory_request == pytest.approx(expected_memory)
  assert (spec.accelerator.type, spec.accelerator.count) == ("nvidia.com/gpu", 2)


def test_no_resources_no_fields():
  assert not platform.resource_spec(PodResources()).ByteSize()
  assert not platform.executor_config(StepPod()).ByteSize()


@dsl.container_component
def _step():
  return dsl.ContainerSpec(image="i", command=["true"])


def _kfp_compiled_platform_section(tmp_path):
  """The same settings made with kfp-kubernetes on a kfp pipeline, compiled by kfp."""

  @dsl.pipeline(name="p")
  def pipeline():
    task = _step()
    kubernetes.use_secret_as_env(task, "wrn-s3", {"accesskey": "AWS_ACCESS_KEY_ID",
                                                  "secretkey": "AWS_SECRET_ACCESS_KEY"})
    kubernetes.add_node_selector(task, "nvidia.com/gpu.present", "true")
    kubernetes.add_toleration(task, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
    kubernetes.add_toleration(task, key="dedicated", operator="Equal", value="ml")
    kubernetes.set_image_pull_secrets(task, ["regcred"])

  path = tmp_path / "kfp.yaml"
  kfp_compiler.Compiler().compile(pipeline, str(path))
  with open(path) as f:
    _, section = yaml.safe_load_all(f)
  return section


def test_the_platform_section_is_what_kfp_writes_for_the_same_settings(tmp_path):
  spec = {"deploymentSpec": {"executors": {"exec-step": {"container": {}},
                                           "Schema_executor": {"importer": {}}}},
          "components": {"Trainer": {"executorLabel": "exec-step"},
                         "Schema": {"executorLabel": "Schema_executor"}}}
  config = from_flags(["--image=i", "--output_dir=s3://bucket/wrn", "--pipeline_name=p",
                       "--credentials_secret=wrn-s3",
                       "--trainer_node_selector=nvidia.com/gpu.present=true",
                       "--trainer_tolerations=nvidia.com/gpu:NoSchedule,dedicated=ml",
                       "--image_pull_secrets=regcred"])
  ours = platform.platform_spec(config, spec)
  assert ours == _kfp_compiled_platform_section(tmp_path)  # The importer has no pod.
  assert platform.executor_config(POD) == platform.executor_config(
      platform.step_pod(config, "trainer"))
