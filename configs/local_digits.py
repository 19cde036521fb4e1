"""The `make run` default: a WRN-16-2 that trains on the embedded digits in a few minutes on
two CPU cores, with AugMix, the reference corruptions and the full gate."""
from configs.shared import (PIPELINE_AUGMIX, PIPELINE_CALIBRATION, PIPELINE_ENSEMBLE,
                            PIPELINE_MODEL)


def get_config() -> dict:
  return dict(dataset="digits", depth=16, width_multiplier=2, train_epochs=15,
              **PIPELINE_AUGMIX, **PIPELINE_CALIBRATION, **PIPELINE_ENSEMBLE, **PIPELINE_MODEL)
