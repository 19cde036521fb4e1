"""The cluster preset: the flagship (CIFAR-10, WRN-28-10) under a Kubeflow-legal pipeline name.
`python -m kubeflow compile` starts from it; --image and an object-storage --output_dir are
the cluster's own flags."""
from configs import wrn28_10_cifar10

PIPELINE_NAME = "wrn-image-classifier"  # KFP names: [a-z0-9][a-z0-9-]{0,127}.
# kubeflow/cluster_config.py KubeflowConfig's fields, which the local runner refuses by name
# (it may not import kubeflow/; kubeflow/cluster_config_test.py keeps the two equal).
CLUSTER_FLAGS = (
    "image", "kubeflow_target", "vertex_project", "vertex_region", "machine_type",
    "accelerator_type", "accelerator_count", "replica_count", "dataflow_project",
    "dataflow_region", "dataflow_temp_location", "trainer_cpu", "trainer_memory", "beam_cpu",
    "beam_memory", "credentials_secret", "credentials_secret_keys", "s3_endpoint", "s3_region",
    "trainer_node_selector", "trainer_tolerations", "image_pull_secrets")


def get_config() -> dict:
  config = wrn28_10_cifar10.get_config()
  config.update(pipeline_name=PIPELINE_NAME)
  return config
