"""TFX's Evaluator, with the model in production (components/production_model.py) as baseline.

A snapshot of nothing in production (the first run) is no baseline: TFMA then drops the change
thresholds and judges the candidate on the absolute bounds alone, as it does without one.
"""
import logging
from typing import Any, Dict, List

from tfx import types
from tfx import v1 as tfx
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs

from components.production_model import holds_model

log = logging.getLogger(__name__)


class ProductionBaselineExecutor(evaluator_executor.Executor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]) -> None:
    key = standard_component_specs.BASELINE_MODEL_KEY
    given = input_dict.get(key, [])
    baselines = [model for model in given if holds_model(model)]
    if len(baselines) != len(given):
      log.info("No model in production yet: the candidate is judged on absolute bounds only.")
    input_dict = {k: v for k, v in input_dict.items() if k != key}
    if baselines:
      input_dict[key] = baselines
    super().Do(input_dict, output_dict, exec_properties)


class Evaluator(tfx.components.Evaluator):
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(ProductionBaselineExecutor)
