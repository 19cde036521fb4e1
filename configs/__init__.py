"""Named presets: one module per experiment, each with a `get_config()` (as big_vision's
configs/*.py) that returns the fields it sets, as plain data. Every runner starts from one
(`--config=NAME`, pipeline.config.from_flags) and flags override its fields; a field no preset
sets keeps its PipelineConfig / TrainerConfig / KubeflowConfig default.

  local_digits       the `make run` default: WRN-16-2 on the embedded digits, minutes on a CPU
  wrn28_10_cifar10   the flagship recipe: WRN-28-10 on CIFAR-10 (tensorflow-datasets), locally
  kubeflow           the cluster preset: WRN-28-10 under a Kubeflow-legal pipeline name
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, Tuple

PRESETS: Tuple[str, ...] = ("local_digits", "wrn28_10_cifar10", "kubeflow")
DEFAULT_PRESET = "local_digits"


def get_config(name: str = DEFAULT_PRESET) -> Dict[str, Any]:
  """The named preset's fields (pipeline, trainer and cluster fields by name)."""
  if name not in PRESETS:
    raise ValueError(f"Invalid config value config={name!r}: must be one of {PRESETS} "
                     "(the presets in configs/).")
  return dict(importlib.import_module(f"configs.{name}").get_config())
