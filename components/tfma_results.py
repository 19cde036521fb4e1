"""The Evaluator's results in plain terms: metric values per slice, and why the gate said no."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

import tensorflow_model_analysis as tfma

from components.calibration_metrics import (ACCURACY_NAME, BRIER_NAME, ECE_NAME,
                                            MEAN_SLICE_ECE_NAME, NLL_NAME)

EXAMPLE_COUNT_NAME = "example_count"
# Names of the gated metrics as the report shows them.
METRIC_LABELS = {ACCURACY_NAME: "accuracy", ECE_NAME: "ECE", NLL_NAME: "NLL",
                 BRIER_NAME: "Brier", EXAMPLE_COUNT_NAME: "examples",
                 MEAN_SLICE_ECE_NAME: "cECE"}

Slice = Tuple[Tuple[str, object], ...]  # ((column, value), ...), sorted; () is everything.


def slice_of(slice_key) -> Slice:
  """A TFMA SliceKey proto as ((column, value), ...)."""
  items = []
  for key in slice_key.single_slice_keys:
    kind = key.WhichOneof("kind")
    value = getattr(key, kind) if kind else None
    items.append((key.column, value.decode("utf-8") if isinstance(value, bytes) else value))
  return tuple(sorted(items))


def slice_name(slice_: Slice) -> str:
  return ", ".join(f"{column}={value}" for column, value in slice_) or "all examples"


@dataclasses.dataclass(frozen=True)
class Failure:
  """One bound the candidate missed."""
  metric: str  # As the report names it: accuracy, ECE, NLL, ...
  slice: str
  change: bool  # A change bound (against the blessed baseline) rather than a value bound.
  value: float  # The metric, or for a change bound the candidate minus the baseline.
  bound: float
  lower: bool  # The bound is a minimum (value >= bound); else a maximum.
  margin: float  # How far past the bound the value is (> 0).

  def describe(self) -> str:
    relation, miss = (">=", "short by") if self.lower else ("<=", "over by")
    if self.change:
      return (f"{self.metric} on {self.slice} changed by {self.value:+.4f} against the blessed "
              f"baseline; allowed {relation} {self.bound:+.4f} ({miss} {self.margin:.4f})")
    return (f"{self.metric} on {self.slice} is {self.value:.4f}; needs {relation} "
            f"{self.bound:.4f} ({miss} {self.margin:.4f})")


def _failure(slice_: Slice, failure) -> Failure:
  name = METRIC_LABELS.get(failure.metric_key.name, failure.metric_key.name)
  value = failure.metric_value.double_value.value
  threshold = failure.metric_threshold
  change = failure.metric_key.is_diff or threshold.HasField("change_threshold")
  if change:
    bound = threshold.change_threshold.absolute.value
    lower = threshold.change_threshold.direction == tfma.MetricDirection.HIGHER_IS_BETTER
  elif threshold.value_threshold.HasField("lower_bound") and \
      value < threshold.value_threshold.lower_bound.value:
    bound, lower = threshold.value_threshold.lower_bound.value, True
  else:
    bound, lower = threshold.value_threshold.upper_bound.value, False
  return Failure(metric=name, slice=slice_name(slice_), change=change, value=value, bound=bound,
                 lower=lower, margin=(bound - value) if lower else (value - bound))


def failures(validation: tfma.ValidationResult) -> List[Failure]:
  """Every bound the candidate missed, and every gated slice that had no examples."""
  result = sorted((_failure(slice_of(per_slice.slice_key), failure)
                   for per_slice in validation.metric_validations_per_slice
                   for failure in per_slice.failures),
                  key=lambda f: (f.slice != "eval_set=eval", f.change, f.metric))
  for missing in validation.missing_slices:
    spec = ", ".join(f"{k}={v}" for k, v in sorted(missing.feature_values.items()))
    result.append(Failure(metric="examples", slice=spec or "all examples", change=False,
                          value=0.0, bound=1.0, lower=True, margin=1.0))
  return result


CANDIDATE, BASELINE = "candidate", "baseline"


def load_metrics(evaluation_uri: str) -> Dict[Slice, Dict[Tuple[str, str, str, bool], object]]:
  """{slice: {(model, output name, metric name, is diff): value}}, model "candidate" or
  "baseline"; a value is a float, or a numpy array for the reliability diagram's bins."""
  import numpy as np
  result: Dict[Slice, Dict] = {}
  for metrics in tfma.load_metrics(evaluation_uri):
    values = result.setdefault(slice_of(metrics.slice_key), {})
    for entry in metrics.metric_keys_and_values:
      key = entry.key
      kind = entry.value.WhichOneof("type")
      if kind == "double_value":
        value = entry.value.double_value.value
      elif kind == "array_value":
        array = entry.value.array_value
        value = np.asarray(array.float64_values or array.float32_values).reshape(array.shape)
      else:
        continue
      model = BASELINE if key.model_name == BASELINE else CANDIDATE
      values[(model, key.output_name, key.name, key.is_diff)] = value
  return result


def metric(values: Dict, slice_: Slice, output: str, name: str, model: str = CANDIDATE,
           diff: bool = False):
  return values.get(slice_, {}).get((model, output, name, diff))
