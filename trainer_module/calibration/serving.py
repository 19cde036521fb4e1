"""The calibration's part of the served graph: the temperatures each input is served with, and
its distance (and detail) score, computed as the numpy fit computed them (float64)."""
from typing import Optional

import tensorflow as tf

from trainer_module.calibration.detail import DETAIL_EPSILON, DetailScale
from trainer_module.calibration.distances import MIN_DISTANCE, FeatureSupport, Support, parts
from trainer_module.calibration.maths import MAX_TEMPERATURE, MIN_TEMPERATURE


def graph_distances(features: tf.Tensor, part: FeatureSupport) -> tf.Tensor:
  """[batch] mahalanobis_distance in the serving graph (float64, as the fit computed it)."""
  means = tf.constant(part.class_means, tf.float64)
  diff = tf.cast(part.columns(features), tf.float64)[:, tf.newaxis, :] - means[tf.newaxis]
  squared = tf.einsum("ncd,de,nce->nc", diff, tf.constant(part.precision, tf.float64), diff)
  return tf.sqrt(tf.maximum(tf.reduce_min(squared, axis=1), 0.0))


def constant_temperatures(logits: tf.Tensor, temperature: float) -> tf.Tensor:
  """[batch] one T for every input."""
  return tf.fill([tf.shape(logits)[0]], tf.constant(temperature, tf.float32))


def graph_distance_scores(features: tf.Tensor, support: Support) -> tf.Tensor:
  """distance_scores in the serving graph ([batch] float64)."""
  return tf.reduce_mean(tf.stack([
      (tf.math.log(tf.maximum(graph_distances(features, part), MIN_DISTANCE)) -
       part.log_distance_mean) / part.log_distance_std for part in parts(support)]), axis=0)



def curve_temperatures(curve, scores: tf.Tensor, details: Optional[tf.Tensor] = None) -> tf.Tensor:
  """distance_curve.DistanceCurve.temperatures in the serving graph: [batch] float32 from
  float64 distance (and detail) scores."""
  log_t = curve.log_temperature + curve.slope * tf.cast(scores, tf.float64)
  if curve.detail_slope:
    if details is None:
      raise ValueError("This curve reads the inputs' detail scores; none were given.")
    log_t += curve.detail_slope * tf.cast(details, tf.float64)
  return tf.cast(tf.clip_by_value(tf.exp(log_t), MIN_TEMPERATURE, MAX_TEMPERATURE), tf.float32)


def graph_detail_scores(images: tf.Tensor, scale: DetailScale) -> tf.Tensor:
  """detail.detail_scores in the serving graph ([batch] float64, as the fit computed them)."""
  grey = tf.reduce_mean(tf.cast(images, tf.float64), axis=-1, keepdims=True)
  padded = tf.pad(grey, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")  # Edge repeated.
  local_mean = tf.nn.avg_pool2d(padded, ksize=3, strides=1, padding="VALID")
  fine = tf.reduce_mean(tf.abs(grey - local_mean), axis=[1, 2, 3])
  raw = tf.math.log(fine / (tf.math.reduce_std(grey, axis=[1, 2, 3]) + DETAIL_EPSILON)
                    + DETAIL_EPSILON)
  return (raw - scale.mean) / scale.std
