"""The `tiny` preset (configs/tiny.py) as flags over any other preset: what it changes of the
default, for the tests that pick their own dataset or start from the cluster preset."""
import configs


def _flag(name, value) -> str:
  text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
  return f"--{name}={text}"


# The tiny preset's network (WRN-10-1), for tests that build a TrainerConfig or a model directly.
TINY_NETWORK = {name: configs.get_config("tiny")[name] for name in ("depth", "width_multiplier")}
TINY_NETWORK_FLAGS = [_flag(name, value) for name, value in TINY_NETWORK.items()]
# Uncertainty Baselines' plain recipe: the robustness and calibration the trainer's defaults add
# (AugMix from Transform's view sets, spectral normalisation, the SNGP layer, centring, the map by
# feature distance) turned off, one T chosen under the validation shift instead. For tests whose
# subject is something else (they train and export faster, on data without AugMix views) and
# the benches that compare with a plain loop.
PLAIN = {"augmix": False, "aug_count": 1, "augmix_view_sets": 1, "spectral_norm_bound": 0.0,
         "output_layer": "dense", "per_image_normalization": "none",
         "temperature_fit": "validation_corruptions"}
PLAIN_FLAGS = [_flag(name, value) for name, value in PLAIN.items()]


def plain_trainer(**fields):
  """A TrainerConfig of the plain recipe, with `fields` (flat names) over it."""
  from trainer_module.config import TrainerConfig
  return TrainerConfig().replace(**{**PLAIN, **fields})
SMALL_MODEL = [_flag(name, value) for name, value in configs.get_config("tiny").items()
               if configs.get_config(configs.DEFAULT_PRESET).get(name) != value]


def learnable_images(count: int = 128):
  """(images, no AugMix views, labels) of a two-class problem the tiny network learns in a few
  epochs: class 1 is redder."""
  import numpy as np
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 2, count)
  images = rng.normal(size=(count, 32, 32, 3)).astype(np.float32) * 0.1
  images[labels == 1, :, :, 0] += 1.0
  return images, np.zeros((count, 0, 32, 32, 3), np.float32), labels
