"""The cluster preset: the flagship (CIFAR-10, WRN-28-10) under a Kubeflow-legal pipeline name.
`python -m kubeflow compile` starts from it; --image and an object-storage --output_dir are
the cluster's own flags."""
from configs import wrn28_10_cifar10

PIPELINE_NAME = "wrn-image-classifier"  # KFP names: [a-z0-9][a-z0-9-]{0,127}.


def get_config() -> dict:
  config = wrn28_10_cifar10.get_config()
  config.update(pipeline_name=PIPELINE_NAME)
  return config
