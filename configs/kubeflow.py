"""The cluster preset: the original WRN-28-10 recipe (GPU/TPU scale) with the pipeline's
AugMix, under a Kubeflow-legal pipeline name. `python -m kubeflow compile` starts from it;
--image and an object-storage --output_dir make it a cluster config."""
from configs.shared import PIPELINE_AUGMIX, PIPELINE_CALIBRATION, PIPELINE_MODEL

PIPELINE_NAME = "wrn-image-classifier"  # KFP names: [a-z0-9][a-z0-9-]{0,127}.


def get_config() -> dict:
  return dict(pipeline_name=PIPELINE_NAME, depth=28, width_multiplier=10, train_epochs=200,
              **PIPELINE_AUGMIX, **PIPELINE_CALIBRATION, **PIPELINE_MODEL)
