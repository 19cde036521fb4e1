"""The flagship: WRN-28-10 on CIFAR-10 with the original script's recipe (Uncertainty
Baselines' `baselines/cifar/deterministic.py` defaults, which are TrainerConfig's) plus the
pipeline's AugMix, evaluated on tfds' CIFAR-10-C. Needs the tensorflow-datasets copies of
cifar10 and cifar10_corrupted (`--tfds_data_dir`), and accelerators to finish in hours."""
from configs.shared import PIPELINE_AUGMIX, PIPELINE_CALIBRATION, PIPELINE_MODEL


def get_config() -> dict:
  return dict(dataset="cifar10", depth=28, width_multiplier=10, train_epochs=200,
              **PIPELINE_AUGMIX, **PIPELINE_CALIBRATION, **PIPELINE_MODEL)
