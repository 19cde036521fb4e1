"""The flagship: WRN-28-10 on CIFAR-10 with the original script's recipe (Uncertainty
Baselines' `baselines/cifar/deterministic.py` defaults: TrainerConfig's) plus the pipeline's
AugMix, evaluated on tfds' CIFAR-10-C. Needs the tensorflow-datasets copies of cifar10 and
cifar10_corrupted (`--tfds_data_dir`), and accelerators to finish in hours rather than days."""
from configs.shared import PIPELINE_AUGMIX
from pipeline.config import PipelineConfig
from trainer_module.config import TrainerConfig


def get_config() -> PipelineConfig:
  return PipelineConfig(dataset="cifar10", trainer=TrainerConfig(**PIPELINE_AUGMIX))
