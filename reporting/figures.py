"""The report's figures, read from the Evaluator's TFMA output: the means over corruption x
severity slices (cA, cNLL, cECE, as Uncertainty Baselines' tables give them) and per corruption
family, with their floors and bootstrap deviations, and the headline figures recorded on the
report artifact; and the run's settings the report needs, as plain values.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Dict, Optional, Tuple

import numpy as np

from components import evaluation_set, tfma_results
from components.calibration_metrics import (ACCURACY_NAME, ECE_NAME, MEAN_SLICE_ECE_SD_NAME,
                                            MEAN_SLICE_GAP_NAME, MEAN_SLICE_GAP_SD_NAME,
                                            NLL_NAME, RELIABILITY_NAME)
from trainer_module import reference_corruptions as corruptions
from trainer_module.features import PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY
from trainer_module.metrics import ece_floor

CALIBRATED, RAW = PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY
EVAL = ((evaluation_set.EVAL_SET_KEY, evaluation_set.EVAL),)
TEST = ((evaluation_set.EVAL_SET_KEY, evaluation_set.TEST),)
CORRUPTED = ((evaluation_set.EVAL_SET_KEY, evaluation_set.CORRUPTED),)
ECE_FLOOR = "ece_floor"  # corrupted_means' key of the cECE floor.
# corrupted_means' and family_means' keys of the bootstrap standard deviations of cECE and of
# the confidence gap (the Evaluator's MeanSliceECE; None when it had no source images).
GAP, ECE_SD, GAP_SD = "gap", "ece_sd", "gap_sd"


def mean(values) -> Optional[float]:
  """The mean of every value, or None when any is missing: a mean over some of the slices is
  not the metric the report names."""
  values = list(values)
  return None if not values or any(v is None for v in values) else float(np.mean(values))


def corruption_slice(name: str, severity: int) -> tfma_results.Slice:
  return ((evaluation_set.CORRUPTION_KEY, name), (evaluation_set.SEVERITY_KEY, severity))


def slice_ece_floor(values: Dict, slice_, output: str) -> Optional[float]:
  """The ECE a perfectly calibrated model would measure on this slice, from its reliability
  diagram's bins (metrics.ece_floor): what the slice's size alone adds to its ECE."""
  bins = tfma_results.metric(values, slice_, output, RELIABILITY_NAME)
  if bins is None or not np.sum(bins[:, 0]):
    return None
  return ece_floor(bins[:, 0], bins[:, 1])


def _finite(values: Dict, slice_, output: str, name: str) -> Optional[float]:
  """A metric's value, None when TFMA has none or it is NaN (MeanSliceECE without a bootstrap,
  or on a slice of no corrupted images)."""
  value = tfma_results.metric(values, slice_, output, name)
  return None if value is None or not np.isfinite(value) else float(value)


def corrupted_means(values: Dict, output: str, names) -> Dict[str, Optional[float]]:
  """cA, cNLL, cECE: each metric's mean over the corruption x severity slices (UB's tables),
  and the cECE floor, the mean of the slices' ECE floors (ECE_FLOOR)."""
  slices = [corruption_slice(c, s) for c in names for s in corruptions.SEVERITIES]
  result = {name: mean(tfma_results.metric(values, slice_, output, name) for slice_ in slices)
            for name in (ACCURACY_NAME, NLL_NAME, ECE_NAME)}
  result[ECE_FLOOR] = mean(slice_ece_floor(values, slice_, output) for slice_ in slices)
  return result


def corrupted_ece_sd(values: Dict, output: str) -> Optional[float]:
  """cECE's bootstrap standard deviation over the test images, the Evaluator's MeanSliceECE on
  the whole corrupted set (None without a bootstrap)."""
  return _finite(values, CORRUPTED, output, MEAN_SLICE_ECE_SD_NAME)


def family_means(values: Dict, output: str, names) -> Dict[str, Dict[str, Optional[float]]]:
  """corrupted_means per corruption family (noise, blur, weather, digital) of `names`, the mean
  over its slices of confidence minus accuracy (GAP), and both means' bootstrap standard
  deviations (ECE_SD, GAP_SD), the last three the Evaluator's MeanSliceECE on the family's
  slice; all None when a slice of the family is missing, as its cECE is."""
  families = {}
  for name in names:
    families.setdefault(corruptions.FAMILY_OF[name], []).append(name)
  result = {}
  for family, members in families.items():
    means = corrupted_means(values, output, members)
    family_slice = ((evaluation_set.FAMILY_KEY, family),)
    complete = means[ECE_NAME] is not None
    result[family] = {**means, **{
        key: _finite(values, family_slice, output, name) if complete else None
        for key, name in ((GAP, MEAN_SLICE_GAP_NAME), (ECE_SD, MEAN_SLICE_ECE_SD_NAME),
                          (GAP_SD, MEAN_SLICE_GAP_SD_NAME))}}
  return result


@dataclasses.dataclass(frozen=True)
class GateBound:
  """One bound of the gate, as the report shows it (pipeline/evaluation.py sets the gate)."""
  label: str  # accuracy, ECE, cA (mean corrupted accuracy), ...
  eval_set: str  # The slice eval_set=<this>: eval or corrupted.
  metric: str  # The TFMA metric name.
  higher_is_better: bool
  bound: float
  max_change: float  # Allowed change against the blessed baseline.

  @property
  def slice(self) -> tfma_results.Slice:
    return ((evaluation_set.EVAL_SET_KEY, self.eval_set),)


@dataclasses.dataclass(frozen=True)
class ReportSettings:
  """What the report needs of the run's config, as plain values (the report step's execution
  property: the report sits below the pipeline config)."""
  pipeline_name: str
  dataset: str
  model: str  # E.g. WRN-28-10.
  num_classes: int
  corruptions: Tuple[str, ...]
  bounds: Tuple[GateBound, ...]

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> "ReportSettings":
    values = json.loads(text)
    return cls(**{**values, "corruptions": tuple(values["corruptions"]),
                  "bounds": tuple(GateBound(**bound) for bound in values["bounds"])})


def headline(settings: ReportSettings, values: Dict) -> Dict[str, float]:
  """The figures the report's artifact records: the gated clean eval numbers and cA, cNLL,
  cECE (calibrated probabilities); a figure TFMA did not produce is left out."""
  get = lambda slice_, name: tfma_results.metric(values, slice_, CALIBRATED, name)  # noqa: E731
  figures = {"eval_accuracy": get(EVAL, ACCURACY_NAME), "eval_nll": get(EVAL, NLL_NAME),
             "eval_ece": get(EVAL, ECE_NAME), "test_accuracy": get(TEST, ACCURACY_NAME)}
  if settings.corruptions:
    means = corrupted_means(values, CALIBRATED, settings.corruptions)
    figures.update(corrupted_accuracy=means[ACCURACY_NAME], corrupted_nll=means[NLL_NAME],
                   corrupted_ece=means[ECE_NAME], corrupted_ece_floor=means[ECE_FLOOR],
                   corrupted_ece_sd=corrupted_ece_sd(values, CALIBRATED))
  return {name: float(value) for name, value in figures.items() if value is not None}
