"""The served graph's temperatures: one T, and the curve's, as numpy's."""
import numpy as np
import tensorflow as tf

from trainer_module.calibration import serving
from trainer_module.calibration.distance_curve import DistanceCurve
from trainer_module.calibration.distances import distance_scores, support_from_features
from trainer_module.calibration.maths import MAX_TEMPERATURE, MIN_TEMPERATURE


def test_one_temperature_fills_the_batch():
  temperatures = serving.constant_temperatures(tf.zeros([3, 10]), 0.25)
  assert temperatures.dtype == tf.float32 and temperatures.numpy().tolist() == [0.25] * 3


def test_the_graph_serves_what_numpy_computes_near_and_far_from_the_data():
  rng = np.random.default_rng(5)
  labels = np.arange(80) % 2
  support = support_from_features(rng.normal(size=(80, 4)), labels, rng.normal(size=(20, 4)))
  queries = np.concatenate([rng.normal(size=(6, 4)), rng.normal(size=(6, 4)) + 8.0])
  scores = serving.graph_distance_scores(tf.constant(queries), support)
  np.testing.assert_allclose(scores, distance_scores(queries, support), rtol=1e-9)
  curve = DistanceCurve(-0.5, 2.0)
  served = serving.curve_temperatures(curve, scores).numpy()
  np.testing.assert_allclose(served, curve.temperatures(scores.numpy()), rtol=1e-6)
  assert MIN_TEMPERATURE <= served.min() and served.max() <= MAX_TEMPERATURE
