"""Named presets: one module per experiment whose `get_config()` returns the fields it sets,
starting from the preset it builds on (flax's examples/imagenet/configs); flags override them.

  local_digits       the default (`make run`): WRN-16-2 on the embedded digits, minutes on a CPU
  wrn28_10_cifar10   the defaults' own size, WRN-28-10 for 200 epochs, on CIFAR-10
  kubeflow           wrn28_10_cifar10 under a Kubeflow-legal pipeline name (the cluster's)
  tiny               local_digits at the tests' size: WRN-10-1 for 6 epochs

Each returns only the fields it changes from the config dataclasses' defaults (the recommended
settings) or from the preset it builds on.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, Tuple

PRESETS: Tuple[str, ...] = ("local_digits", "wrn28_10_cifar10", "kubeflow", "tiny")
DEFAULT_PRESET = "local_digits"


def get_config(name: str = DEFAULT_PRESET) -> Dict[str, Any]:
  """The named preset's fields (pipeline, trainer and cluster fields by name)."""
  if name not in PRESETS:
    raise ValueError(f"Invalid config value config={name!r}: must be one of {PRESETS} "
                     "(the presets in configs/).")
  return dict(importlib.import_module(f"configs.{name}").get_config())
