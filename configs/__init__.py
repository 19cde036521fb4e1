"""Named presets: one module per experiment, each with a `get_config()` (as big_vision's
configs/*.py). Every runner starts from one (`--config=NAME`) and flags override its fields.

  local_digits       the `make run` default: WRN-16-2 on the embedded digits, minutes on a CPU
  wrn28_10_cifar10   the flagship recipe: WRN-28-10 on CIFAR-10 (tensorflow-datasets), locally
  kubeflow           the cluster preset: WRN-28-10, a Kubeflow-legal pipeline name
"""
from __future__ import annotations

import importlib
from typing import Tuple

PRESETS: Tuple[str, ...] = ("local_digits", "wrn28_10_cifar10", "kubeflow")
DEFAULT_PRESET = "local_digits"


def get_config(name: str = DEFAULT_PRESET):
  """The named preset's PipelineConfig."""
  if name not in PRESETS:
    raise ValueError(f"Invalid config value config={name!r}: must be one of {PRESETS} "
                     "(the presets in configs/).")
  return importlib.import_module(f"configs.{name}").get_config()
