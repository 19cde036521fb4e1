"""Feature distances: Mahalanobis to the nearest class mean, supports and scores, in numpy and in
the served graph."""
import numpy as np
import pytest
import tensorflow as tf

from test_support.calibration_data import expected_class_statistics
from trainer_module.calibration import distance_curve, serving
from trainer_module.calibration.distances import (class_statistics, distance_scores,
                                                  mahalanobis_distance, support_from_features)


def test_the_mahalanobis_distance_is_zero_at_a_class_mean_and_blind_to_linear_rescaling():
  rng = np.random.default_rng(12)
  labels = np.arange(600) % 3
  features = rng.normal(size=(600, 4)) + labels[:, np.newaxis] * 3.0
  means, precision = class_statistics(features, labels)
  assert mahalanobis_distance(means, means, precision) == pytest.approx(0.0,
                                                                        abs=1e-6)
  mixing = rng.normal(size=(4, 4)) + 4 * np.eye(4)
  queries = rng.normal(size=(20, 4)) * 5
  moved_means, moved_precision = class_statistics(features @ mixing, labels)
  np.testing.assert_allclose(
      mahalanobis_distance(queries @ mixing, moved_means, moved_precision),
      mahalanobis_distance(queries, means, precision), rtol=1e-4)
  far = mahalanobis_distance(means + 100.0, means, precision)
  assert np.all(far > mahalanobis_distance(features, means, precision).max())


def test_the_shared_covariance_is_the_classes_pooled_within_class_covariance():
  """Two unit-variance classes 10 apart along the first feature: a point one unit beyond a
  class mean lies at distance ~1. (About the overall mean that feature's variance would be
  ~26, and the point's distance ~0.2.)"""
  rng = np.random.default_rng(30)
  labels = np.arange(2000) % 2
  features = rng.normal(size=(2000, 3)) + np.outer(labels * 10.0 - 5.0, [1.0, 0.0, 0.0])
  means, precision = class_statistics(features, labels)
  expected_means, expected_precision = expected_class_statistics(features, labels)
  np.testing.assert_allclose(means, expected_means, rtol=1e-12)
  np.testing.assert_allclose(precision, expected_precision, rtol=1e-9, atol=1e-12)
  beyond = means[:1] - [[1.0, 0.0, 0.0]]
  assert mahalanobis_distance(beyond, means, precision) == pytest.approx([1.0], abs=0.1)


def test_the_support_holds_every_eval_image_and_serving_computes_the_same_distances():
  rng = np.random.default_rng(13)
  labels = np.arange(300) % 3
  train = rng.normal(size=(300, 5)) + labels[:, np.newaxis]
  eval_features = rng.normal(size=(40, 5))
  support = support_from_features(train, labels, eval_features)
  distances = mahalanobis_distance(eval_features, support.class_means,
                                   support.precision)
  assert np.all(distances <= support.radius) and distances.max() > support.radius * 0.999
  queries = np.concatenate([eval_features, rng.normal(size=(40, 5)) * 1.5]).astype(np.float32)
  np.testing.assert_allclose(serving.graph_distances(tf.constant(queries), support),
                             mahalanobis_distance(queries, support.class_means,
                                                  support.precision), rtol=1e-6)


def test_distance_scores_are_the_parts_mean_standardised_log_distance_in_numpy_and_tf():
  rng = np.random.default_rng(28)
  train = rng.normal(0, 1, (80, 6))
  labels = np.arange(80) % 2
  evaluated = rng.normal(0, 1, (30, 6))
  parts = (support_from_features(train[:, :3], labels, evaluated[:, :3], 0),
           support_from_features(train[:, 3:], labels, evaluated[:, 3:], 3))
  inputs = np.concatenate([evaluated[:5], evaluated[5:10] + [[9, 9, 9, 0, 0, 0]]])
  each = [(np.log(mahalanobis_distance(part.columns(inputs), part.class_means,
                                       part.precision)) - part.log_distance_mean)
          / part.log_distance_std for part in parts]
  expected = np.mean(each, axis=0)
  np.testing.assert_allclose(distance_scores(inputs, parts), expected)
  np.testing.assert_allclose(serving.graph_distance_scores(tf.constant(inputs), parts),
                             expected, rtol=1e-9)
  own = distance_scores(evaluated[:, :3], parts[0])
  assert abs(own.mean()) < 1e-9 and own.std() == pytest.approx(1.0)  # The eval images' unit.
  curve = distance_curve.DistanceCurve(-0.5, 0.3)
  np.testing.assert_allclose(serving.curve_temperatures(curve, tf.constant(expected)),
                             curve.temperatures(expected), rtol=1e-6)
