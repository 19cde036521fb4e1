"""Synthetic logits, images and a tiny network for the calibration tests."""
import numpy as np
import tensorflow as tf
import tf_keras as keras


def overconfident(rng, count=4000, true_temperature=2.0, classes=10):
  """Logits whose labels are drawn from softmax(logits / true_temperature)."""
  logits = rng.normal(0.0, 4.0, (count, classes))
  p = np.exp(logits / true_temperature)
  p /= p.sum(axis=1, keepdims=True)
  labels = np.array([rng.choice(classes, p=row) for row in p])
  return logits, labels


def miscalibrated(rng, true_temperature, count=3000, classes=10):
  """Logits of a model whose confidence is off by `true_temperature` (< 1: under-confident)."""
  return overconfident(rng, count, true_temperature, classes)


def one_slice(data):
  return (*data, np.full(len(data[1]), "all"))


def normalised_batches(rng, count, batch_size, mean, std):
  images01 = rng.integers(0, 256, (count, 32, 32, 3)).astype(np.float32) / 255.0
  labels = np.arange(count) % 4
  weights = np.ones(count, np.float32)
  return ((images01 - mean) / std, labels, weights), tf.data.Dataset.from_tensor_slices(
      ((images01 - mean) / std, labels, weights)).batch(batch_size)


def tiny_pooled_network():
  """Images -> 4 logits through one global average pooling (a penultimate layer)."""
  keras.utils.set_random_seed(0)
  inputs = keras.Input((32, 32, 3))
  pooled = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(6, 3)(inputs))
  return keras.Model(inputs, keras.layers.Dense(4)(pooled))


def labelled_logits(rng, count, margin, correct_fraction, classes=4):
  """Logits whose top class is the label for `correct_fraction` of the examples, a random
  other class otherwise, `margin` above the rest."""
  labels = rng.integers(0, classes, count)
  top = np.where(rng.random(count) < correct_fraction, labels,
                 (labels + rng.integers(1, classes, count)) % classes)
  logits = rng.normal(0.0, 0.1, (count, classes))
  logits[np.arange(count), top] += margin
  return logits, labels


def expected_class_statistics(features, labels):
  """What distances.class_statistics should give, class by class: the class means and the
  inverse of the classes' pooled within-class covariance (each class's scatter about its own
  mean, over all examples) plus a ridge of 1e-6 of its mean variance."""
  features = np.asarray(features, np.float64)
  classes = np.unique(labels)
  means = np.stack([features[labels == c].mean(axis=0) for c in classes])
  scatter = sum((features[labels == c] - mean).T @ (features[labels == c] - mean)
                for c, mean in zip(classes, means)) / len(features)
  width = scatter.shape[0]
  return means, np.linalg.inv(scatter + 1e-6 * np.trace(scatter) / width * np.eye(width))


def feature_distance_fit(seed):
  """What a fit by feature distance is tested on: tiny_pooled_network, 12 eval images (batches
  of 5) with their labels, and the HeldOut sets it reads: the eval batches, their validation
  corruptions (3 images a slice) and 40 train images."""
  from trainer_module.calibration.inputs import validation_corrupted_set
  from trainer_module.calibration.method import HeldOut
  model = tiny_pooled_network()
  rng = np.random.default_rng(seed)
  mean, std = np.array([0.5, 0.5, 0.5], np.float32), np.array([0.25, 0.25, 0.25], np.float32)
  (images, labels, _), batches = normalised_batches(rng, 12, 5, mean, std)
  _, train_batches = normalised_batches(rng, 40, 16, mean, std)
  held_out = HeldOut(batches, validation_corrupted_set(batches, mean, std, 3, 16),
                     train_batches=train_batches)
  return model, images, labels, held_out
