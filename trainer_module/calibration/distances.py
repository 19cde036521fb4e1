"""How far an input lies from the training data: the Mahalanobis distance of its penultimate
features to the nearest training class mean under the classes' shared covariance (Lee et al.,
NeurIPS 2018), in numpy. serving.py computes the same in the served graph.
"""
from typing import NamedTuple, Tuple, Union

import numpy as np

MIN_DISTANCE = 1e-12  # Keeps the log of a distance finite (an input on a class mean).


class FeatureSupport(NamedTuple):
  """Where the eval images lie in the network's penultimate feature space: the training
  classes' feature means, the inverse of their shared covariance, and the largest Mahalanobis
  distance of an eval image to its nearest class mean (Lee et al., NeurIPS 2018). `start`: the
  first of the features' columns it reads (an ensemble member's block among the members'
  features side by side); it reads as many as the means have."""
  class_means: np.ndarray  # [classes, features]
  precision: np.ndarray  # [features, features]
  radius: float
  start: int = 0
  # The eval images' log distances: their mean and standard deviation (distance_scores' unit).
  log_distance_mean: float = 0.0
  log_distance_std: float = 1.0

  def columns(self, features):
    """This support's block of `features` ([batch, all features], numpy or tf)."""
    return features[:, self.start:self.start + self.class_means.shape[1]]



# An ensemble's support: the union of its members', each in its own feature space. One
# FeatureSupport or a tuple of them, wherever a support is taken.
Support = Union[FeatureSupport, Tuple[FeatureSupport, ...]]


def parts(support: Support) -> Tuple[FeatureSupport, ...]:
  return (support,) if isinstance(support, FeatureSupport) else tuple(support)


def class_statistics(features: np.ndarray, labels: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """The per-class feature means and the inverse of the shared (tied) covariance, with a ridge
  of 1e-6 of its mean variance so that it is invertible."""
  x = np.asarray(features, np.float64)
  labels = np.asarray(labels).reshape(-1)
  classes = np.unique(labels)
  means = np.stack([x[labels == c].mean(axis=0) for c in classes])
  centred = x - means[np.searchsorted(classes, labels)]
  covariance = centred.T @ centred / len(x)
  covariance += 1e-6 * np.trace(covariance) / len(covariance) * np.eye(len(covariance))
  return means, np.linalg.inv(covariance)


def mahalanobis_distance(features: np.ndarray, class_means: np.ndarray,
                         precision: np.ndarray) -> np.ndarray:
  """Each example's Mahalanobis distance to the nearest class mean."""
  diff = np.asarray(features, np.float64)[:, np.newaxis, :] - class_means[np.newaxis]
  return np.sqrt(np.maximum(np.einsum("ncd,de,nce->nc", diff, precision, diff), 0.0).min(axis=1))


def distance_scores(features: np.ndarray, support: Support) -> np.ndarray:
  """[batch] how far each input lies from the training data: the log of its Mahalanobis
  distance in standard deviations of the eval images' log distances above their mean (0: as far
  as a typical eval image); for an ensemble's parts, the mean of its members' scores (each in
  its own feature space and units: chosen over the nearest member's on the validation shift,
  docs/robustness.md)."""
  features = np.asarray(features)
  return np.mean([(np.log(np.maximum(mahalanobis_distance(
      part.columns(features), part.class_means, part.precision), MIN_DISTANCE)) -
                   part.log_distance_mean) / part.log_distance_std
                  for part in parts(support)], axis=0)


def support_from_features(train_features: np.ndarray, train_labels: np.ndarray,
                          eval_features: np.ndarray, start: int = 0) -> FeatureSupport:
  """The training classes' feature statistics and the eval images' largest distance."""
  means, precision = class_statistics(train_features, train_labels)
  distances = mahalanobis_distance(eval_features, means, precision)
  log_distances = np.log(np.maximum(distances, MIN_DISTANCE))
  # A relative slack of 1e-6: the farthest eval image stays inside when serving recomputes its
  # features and distance with other rounding.
  return FeatureSupport(means, precision, float(distances.max()) * (1.0 + 1e-6), start,
                        float(log_distances.mean()), float(max(log_distances.std(), 1e-6)))

