"""TFX's Evaluator with the model in production as baseline, its input batches regrouped to the
model's inference batch size (docs/pipeline.md, Evaluator).
"""
import logging
from typing import Any, Dict, Iterable, List

import apache_beam as beam
import pyarrow as pa
import tensorflow_model_analysis as tfma
# tfx.components, not tfx.v1: v1's extensions import the Vertex AI SDK, 2 s more in every pod.
from tfx import components as tfx_components
from tfx import types
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import path_utils

from components.production_model import PRODUCTION_VERSION_KEY, holds_model, incompatibility

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
      candidate = artifact_utils.get_single_uri(input_dict[standard_component_specs.MODEL_KEY])
      problem = incompatibility(path_utils.serving_model_path(candidate),
                                path_utils.serving_model_path(baselines[0].uri))
      if problem:
        version = baselines[0].get_string_custom_property(PRODUCTION_VERSION_KEY)
        raise ValueError(
            f"The model in production ({version or baselines[0].uri}) is incompatible with the "
            f"candidate: {problem}, so the gate cannot compare them. Move that version out of "
            "the serving directory to judge the candidate on the absolute bounds alone.")
      input_dict[key] = baselines
    super().Do(input_dict, output_dict, exec_properties)


def _rows(extracts: dict) -> int:
  return extracts[tfma.ARROW_RECORD_BATCH_KEY].num_rows


def _concatenated(group: Iterable[dict]) -> List[dict]:
  """The group's record batches as one per Arrow schema (splits whose examples carry other
  features infer other schemas; they are not mixed)."""
  by_schema: Dict[str, list] = {}
  for extracts in group:
    if set(extracts) != {tfma.ARROW_RECORD_BATCH_KEY}:
      raise ValueError(f"Expected input extracts of one record batch, got {sorted(extracts)}.")
    batch = extracts[tfma.ARROW_RECORD_BATCH_KEY]
    by_schema.setdefault(str(batch.schema), []).append(batch)
  return [{tfma.ARROW_RECORD_BATCH_KEY: pa.Table.from_batches(batches).combine_chunks()
           .to_batches()[0]} for batches in by_schema.values()]


def regrouped_inputs(rows: int) -> tfma.extractors.Extractor:
  """An extractor that regroups input record batches to about `rows` rows (larger ones pass
  whole), keeping every example once."""

  @beam.ptransform_fn
  def regroup(extracts):
    return (extracts
            | "Group" >> beam.BatchElements(min_batch_size=rows, max_batch_size=rows,
                                            element_size_fn=_rows)
            | "Concatenate" >> beam.FlatMap(_concatenated))

  return tfma.extractors.Extractor(stage_name="RegroupInputBatches", ptransform=regroup())


def custom_extractors(eval_shared_model, eval_config, tensor_adapter_config):
  """TFX's Evaluator UDF: TFMA's default extractors, after regrouping to the first model
  spec's inference_batch_size (when set)."""
  rows = eval_config.model_specs[0].inference_batch_size
  return [*([regrouped_inputs(rows)] if rows else []), *tfma.default_extractors(
      eval_shared_model=eval_shared_model, eval_config=eval_config,
      tensor_adapter_config=tensor_adapter_config)]


class Evaluator(tfx_components.Evaluator):
  """TFX's Evaluator with the production baseline and this module's extractors."""
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(ProductionBaselineExecutor)

  def __init__(self, **kwargs):
    super().__init__(module_path=__name__, **kwargs)
