"""What the drift check computes, as plain functions of arrays (the DriftCheck step,
components/drift_check.py, and bench/drift.py call them): image statistics computed once per
image, TFDV's distances between the baseline's statistics and the new ones, a two-sample test
per feature, and BBSD, the two-sample test on the production model's softmax outputs
(docs/pipeline.md, "Drift").

A feature has moved when TFDV's distance exceeds its bound AND its two-sample test rejects
"same distribution" (Bonferroni-corrected over the features compared): the bound says how much
movement matters, the p-value that the movement is not the noise of a finite sample. A 10-bucket
histogram's Jensen-Shannon divergence, or a class share's L-infinity distance, between two
random halves of the same few hundred images is already a few hundredths, so a bound alone
either misses real shifts or raises false alarms on small data.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image
from scipy import stats as scipy_stats

# Per-image statistics: numbers compared by Jensen-Shannon divergence, the format by L-infinity.
BRIGHTNESS, CONTRAST, COLOURFULNESS, NOISE, HEIGHT, WIDTH = (
    "brightness", "contrast", "colourfulness", "noise", "height", "width")
NUMERIC_IMAGE_STATISTICS = (BRIGHTNESS, CONTRAST, COLOURFULNESS, NOISE, HEIGHT, WIDTH)
FORMAT = "format"
LABEL = "label"
CATEGORICAL = (LABEL, FORMAT)
BBSD = "model outputs (BBSD)"
L_INFINITY = "L-infinity"
JENSEN_SHANNON = "Jensen-Shannon"
HISTOGRAM_BINS = 20  # Of the report's charts only; TFDV buckets its own histograms.


def image_statistics(encoded: bytes) -> Dict[str, object]:
  """One image's statistics, from its encoded bytes: mean brightness and contrast (mean and
  standard deviation of the luma, 0-1), colourfulness (Hasler and Suesstrunk 2003, 0-1 scale),
  noise (Immerkaer 1996's estimate of the noise's standard deviation, 0-1), its stored height,
  width and format."""
  with Image.open(io.BytesIO(encoded)) as image:
    image_format = (image.format or "unknown").lower()
    width, height = image.size
    rgb = np.asarray(image.convert("RGB"), np.float64) / 255.0
  red, green, blue = rgb[..., 0], rgb[..., 1], rgb[..., 2]
  luma = 0.299 * red + 0.587 * green + 0.114 * blue
  rg, yb = red - green, 0.5 * (red + green) - blue
  colourfulness = (np.sqrt(rg.std() ** 2 + yb.std() ** 2)
                   + 0.3 * np.sqrt(rg.mean() ** 2 + yb.mean() ** 2))
  return {BRIGHTNESS: float(luma.mean()), CONTRAST: float(luma.std()),
          COLOURFULNESS: float(colourfulness), NOISE: noise_sigma(luma),
          HEIGHT: int(height), WIDTH: int(width), FORMAT: image_format}


def noise_sigma(grey: np.ndarray) -> float:
  """Immerkaer's fast noise estimate: the mean absolute response to a mask that cancels
  smooth image structure, scaled to the standard deviation of Gaussian noise."""
  if grey.shape[0] < 3 or grey.shape[1] < 3:
    return 0.0
  g = grey
  response = (g[:-2, :-2] - 2 * g[:-2, 1:-1] + g[:-2, 2:]
              - 2 * g[1:-1, :-2] + 4 * g[1:-1, 1:-1] - 2 * g[1:-1, 2:]
              + g[2:, :-2] - 2 * g[2:, 1:-1] + g[2:, 2:])
  return float(np.sqrt(np.pi / 2.0) * np.abs(response).mean() / 6.0)


def ks_test(baseline: np.ndarray, new: np.ndarray) -> Tuple[float, float]:
  """The two-sample Kolmogorov-Smirnov statistic and p-value (scipy's exact or asymptotic)."""
  baseline, new = np.asarray(baseline, np.float64), np.asarray(new, np.float64)
  if not len(baseline) or not len(new):
    return 0.0, 1.0
  result = scipy_stats.ks_2samp(baseline, new)
  return float(result.statistic), float(result.pvalue)


def share_test(baseline_counts: Dict[str, int], new_counts: Dict[str, int]
               ) -> Tuple[float, Optional[str]]:
  """Whether any category's share differs: a two-proportion z-test per category (two-sided),
  Bonferroni-corrected over the categories. Returns the p-value and the category that moved
  most (None with fewer than two categories or an empty side). One test per category, not one
  chi-square over all: a shift of one or two classes' shares, the usual case, is diluted in a
  chi-square's many degrees of freedom."""
  categories = sorted(set(baseline_counts) | set(new_counts))
  n1, n2 = sum(baseline_counts.values()), sum(new_counts.values())
  if len(categories) < 2 or not n1 or not n2:
    return 1.0, None
  p_values = {}
  for category in categories:
    k1, k2 = baseline_counts.get(category, 0), new_counts.get(category, 0)
    pooled = (k1 + k2) / (n1 + n2)
    spread = np.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    z = 0.0 if spread == 0 else (k1 / n1 - k2 / n2) / spread
    p_values[category] = float(2 * scipy_stats.norm.sf(abs(z)))
  worst = min(p_values, key=p_values.get)
  return bonferroni(list(p_values.values())), worst


def bbsd_test(baseline_probabilities: np.ndarray, new_probabilities: np.ndarray
              ) -> Tuple[float, List[float], List[float]]:
  """Black-box shift detection (Rabanser, Guennemann and Lipton, "Failing Loudly", 2019): a
  two-sample KS test per class on the model's softmax outputs, Bonferroni-corrected: the
  p-value is min(1, classes x the smallest per-class p-value). Returns it, and each class's
  KS statistic and p-value."""
  baseline_probabilities = np.asarray(baseline_probabilities, np.float64)
  new_probabilities = np.asarray(new_probabilities, np.float64)
  if baseline_probabilities.shape[1:] != new_probabilities.shape[1:]:
    raise ValueError(f"Softmax outputs of {baseline_probabilities.shape[1:]} and "
                     f"{new_probabilities.shape[1:]} classes cannot be compared.")
  tests = [ks_test(baseline_probabilities[:, k], new_probabilities[:, k])
           for k in range(baseline_probabilities.shape[1])]
  statistics, p_values = [t[0] for t in tests], [t[1] for t in tests]
  return bonferroni(p_values), statistics, p_values


def bonferroni(p_values: Sequence[float]) -> float:
  return float(min(1.0, len(p_values) * min(p_values))) if len(p_values) else 1.0


@dataclasses.dataclass(frozen=True)
class Limits:
  """The bounds and the significance a feature's move is judged by."""
  max_category_distance: float  # L-infinity of the label's (and format's) shares.
  max_image_divergence: float  # Jensen-Shannon divergence of an image statistic's histograms.
  p_value: float  # Family-wise significance, Bonferroni-corrected over the tests that can reject.


@dataclasses.dataclass(frozen=True)
class Comparison:
  """One feature compared: TFDV's distance and its bound (None for BBSD), the two-sample
  p-value, whether it moved, and the distributions to chart (baseline, new; category -> share
  or bin edges + shares)."""
  feature: str
  measure: str  # L_INFINITY, JENSEN_SHANNON or "KS per class, Bonferroni".
  distance: Optional[float]
  bound: Optional[float]
  test: str
  p_value: float
  threshold: float  # The p-value below which the test rejects (after Bonferroni).
  moved: bool
  chart: dict

  def describe(self) -> str:
    size = (f"{self.measure} {self.distance:.4f} (bound {self.bound:g})"
            if self.distance is not None else self.measure)
    return (f"{self.feature}: {size}, {self.test} p-value {self.p_value:.3g} (threshold "
            f"{self.threshold:.3g})")

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, value: dict) -> "Comparison":
    return cls(**value)


def _constant(baseline: np.ndarray, new: np.ndarray) -> bool:
  """Whether both sides hold one and the same value (or nothing)."""
  values = set(np.asarray(baseline).tolist()) | set(np.asarray(new).tolist())
  return len(values) <= 1


def counts(values: Sequence) -> Dict[str, int]:
  keys, numbers = np.unique(np.asarray([str(v) for v in values]), return_counts=True)
  return {str(k): int(n) for k, n in zip(keys, numbers)}


def shares(value_counts: Dict[str, int]) -> Dict[str, float]:
  total = sum(value_counts.values())
  return {k: v / total for k, v in sorted(value_counts.items())} if total else {}


def histogram_chart(baseline: np.ndarray, new: np.ndarray) -> dict:
  """Shared bin edges and each side's share per bin, for the report's chart."""
  both = np.concatenate([baseline, new]).astype(np.float64)
  low, high = (float(both.min()), float(both.max())) if len(both) else (0.0, 1.0)
  if high <= low:
    high = low + 1.0
  edges = np.linspace(low, high, HISTOGRAM_BINS + 1)
  share = lambda v: (np.histogram(v, edges)[0] / max(len(v), 1)).tolist()  # noqa: E731
  return {"edges": edges.tolist(), "baseline": share(baseline), "new": share(new)}


def category_chart(baseline_counts: Dict[str, int], new_counts: Dict[str, int]) -> dict:
  categories = sorted(set(baseline_counts) | set(new_counts), key=_category_order)
  b, n = shares(baseline_counts), shares(new_counts)
  return {"categories": categories, "baseline": [b.get(c, 0.0) for c in categories],
          "new": [n.get(c, 0.0) for c in categories]}


def _category_order(value: str):
  return (0, int(value), "") if value.lstrip("-").isdigit() else (1, 0, value)


def class_set_change(baseline_labels: Dict[str, int], new_labels: Dict[str, int]
                     ) -> Tuple[List[str], List[str]]:
  """(classes in the baseline missing from the new data, classes new to it)."""
  before = {k for k, v in baseline_labels.items() if v > 0}
  after = {k for k, v in new_labels.items() if v > 0}
  return sorted(before - after, key=_category_order), sorted(after - before, key=_category_order)


def tfdv_distances(baseline: Dict[str, np.ndarray], new: Dict[str, np.ndarray],
                   limits: Limits) -> Dict[str, float]:
  """TFDV's drift measurements of every feature, from statistics TFDV generates over the two
  per-image tables: L-infinity for the label and the format (categorical: the label is marked
  `is_categorical`, or TFDV would measure 0 whatever the shift), Jensen-Shannon divergence for
  the numeric image statistics."""
  return measured_drift(statistics(baseline), statistics(new), limits)


def drift_schema(limits: Limits):
  """The schema TFDV compares the per-image tables with: a drift comparator on every feature."""
  from tensorflow_metadata.proto.v0 import schema_pb2
  schema = schema_pb2.Schema()
  for name in CATEGORICAL:
    feature = schema.feature.add(name=name, type=schema_pb2.BYTES)
    feature.drift_comparator.infinity_norm.threshold = limits.max_category_distance
  for name in NUMERIC_IMAGE_STATISTICS:
    feature = schema.feature.add(name=name, type=schema_pb2.FLOAT)
    feature.drift_comparator.jensen_shannon_divergence.threshold = limits.max_image_divergence
  return schema


def statistics(table: Dict[str, np.ndarray]):
  """TFDV statistics of a per-image table (the label and format as strings: categorical)."""
  import pandas as pd
  import tensorflow_data_validation as tfdv
  frame = pd.DataFrame({name: (np.asarray(table[name]).astype(str) if name in CATEGORICAL
                               else np.asarray(table[name], np.float64))
                        for name in CATEGORICAL + NUMERIC_IMAGE_STATISTICS})
  return tfdv.generate_statistics_from_dataframe(frame)


def measured_drift(baseline_statistics, new_statistics, limits: Limits) -> Dict[str, float]:
  """feature -> TFDV's drift measurement (validate_statistics with previous_statistics)."""
  import tensorflow_data_validation as tfdv
  anomalies = tfdv.validate_statistics(new_statistics, drift_schema(limits),
                                       previous_statistics=baseline_statistics)
  measured = {}
  for info in anomalies.drift_skew_info:
    for measurement in info.drift_measurements:
      measured[".".join(info.path.step)] = float(measurement.value)
  return measured


def compare(baseline: Dict[str, np.ndarray], new: Dict[str, np.ndarray], limits: Limits,
            baseline_probabilities: Optional[np.ndarray] = None,
            new_probabilities: Optional[np.ndarray] = None) -> List[Comparison]:
  """Every feature of the per-image tables (LABEL, FORMAT and the numeric statistics: arrays of
  one value per image), and BBSD when both softmax outputs are given."""
  distances = tfdv_distances(baseline, new, limits)
  with_bbsd = baseline_probabilities is not None and new_probabilities is not None
  # Bonferroni over the tests that can reject: a feature with one and the same value on both
  # sides (the size of images all 32x32, their one format) spends none of the significance.
  tests = sum(not _constant(baseline[name], new[name])
              for name in CATEGORICAL + NUMERIC_IMAGE_STATISTICS) + int(with_bbsd)
  threshold = limits.p_value / max(tests, 1)
  comparisons = []
  for name in CATEGORICAL:
    before, after = counts(baseline[name]), counts(new[name])
    p_value, _ = share_test(before, after)
    distance = distances.get(name, 0.0)
    comparisons.append(Comparison(
        name, L_INFINITY, distance, limits.max_category_distance, "share z-test", p_value,
        threshold, distance > limits.max_category_distance and p_value < threshold,
        category_chart(before, after)))
  for name in NUMERIC_IMAGE_STATISTICS:
    before = np.asarray(baseline[name], np.float64)
    after = np.asarray(new[name], np.float64)
    p_value = ks_test(before, after)[1]
    distance = distances.get(name, 0.0)
    comparisons.append(Comparison(
        name, JENSEN_SHANNON, distance, limits.max_image_divergence, "KS", p_value, threshold,
        distance > limits.max_image_divergence and p_value < threshold,
        histogram_chart(before, after)))
  if with_bbsd:
    p_value, statistics_, p_values = bbsd_test(baseline_probabilities, new_probabilities)
    worst = int(np.argmin(p_values))
    chart = histogram_chart(np.asarray(baseline_probabilities)[:, worst],
                            np.asarray(new_probabilities)[:, worst])
    chart.update(class_index=worst, ks_statistics=statistics_, class_p_values=p_values)
    comparisons.append(Comparison(
        BBSD, "KS per class, Bonferroni", None, None, "KS", p_value, threshold,
        p_value < threshold, chart))
  return comparisons
