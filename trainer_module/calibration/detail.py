"""How much fine detail an input image holds for its contrast: s(x) = log(mean |x - box3(x)| /
std(x)) on its grey levels, standardised over the clean eval images. Blur lowers it and noise
raises it, where the feature distance rises for both; `distance_detail_curve` reads both. In
numpy, and in the served graph (serving.graph_detail_scores).
"""
from typing import NamedTuple

import numpy as np

DETAIL_EPSILON = 1e-12  # Keeps the ratio and its log finite on a flat image.


class DetailScale(NamedTuple):
  """The clean eval images' raw detail statistics: their mean and standard deviation (the
  score's unit)."""
  mean: float
  std: float


def raw_detail(images: np.ndarray) -> np.ndarray:
  """[batch] log(mean |grey - its 3x3 mean| / std(grey)) of [batch, height, width, channels]
  images, the 3x3 mean taken with the edge pixels repeated beyond the border."""
  grey = np.asarray(images, np.float64).mean(axis=-1)
  padded = np.pad(grey, ((0, 0), (1, 1), (1, 1)), mode="edge")
  height, width = grey.shape[1:]
  local_mean = sum(padded[:, i:i + height, j:j + width] for i in range(3) for j in range(3)) / 9
  detail = np.abs(grey - local_mean).mean(axis=(1, 2))
  return np.log(detail / (grey.std(axis=(1, 2)) + DETAIL_EPSILON) + DETAIL_EPSILON)


def detail_scale(clean_images: np.ndarray) -> DetailScale:
  raw = raw_detail(clean_images)
  if len(raw) < 2:
    raise ValueError(f"{len(raw)} clean eval images: a detail scale needs at least 2.")
  return DetailScale(float(raw.mean()), float(max(raw.std(), DETAIL_EPSILON)))


def detail_scores(images: np.ndarray, scale: DetailScale) -> np.ndarray:
  """[batch] the images' detail in standard deviations of the clean eval images' from their
  mean: 0 for a typical eval image, below for a blurred one."""
  return (raw_detail(images) - scale.mean) / scale.std
