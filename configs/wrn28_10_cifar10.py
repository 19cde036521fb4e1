"""The flagship: the defaults at the original script's size, WRN-28-10 for 200 epochs
(Uncertainty Baselines' `baselines/cifar/deterministic.py`), on tfds' CIFAR-10 and CIFAR-10-C.
Needs those tfds copies (`--tfds_data_dir`) and accelerators to finish in hours."""


def get_config() -> dict:
  # SNGP's kernel scale (128) and per-image centring were chosen on the digits' WRN-16-2 and are
  # untested on WRN-28-10's 640-wide features: the flagship keeps UB's dense head and inputs.
  # Like the digits preset, it corrupts every test image for the robustness set.
  return dict(dataset="cifar10", output_layer="dense", per_image_normalization="none",
              examples_per_corruption=0)
