"""The cluster preset: the original WRN-28-10 recipe (GPU/TPU scale) with the pipeline's
AugMix, under a Kubeflow-legal pipeline name. `python -m kubeflow compile` starts from it;
--image and an object-storage --output_dir make it a cluster config."""
from configs.shared import PIPELINE_AUGMIX
from pipeline.cluster_config import KUBEFLOW_PIPELINE_NAME
from pipeline.config import PipelineConfig
from trainer_module.config import TrainerConfig


def get_config() -> PipelineConfig:
  return PipelineConfig(pipeline_name=KUBEFLOW_PIPELINE_NAME,
                        trainer=TrainerConfig(**PIPELINE_AUGMIX))
