"""What the network gives on held-out batches: its logits, and the penultimate features
distances are measured in (Keras and tf.data)."""
from typing import Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from trainer_module.calibration.distances import Support, support_from_features
from trainer_module.calibration.maths import TemperatureFitError


def model_logits(model, batches: tf.data.Dataset) -> Tuple[np.ndarray, np.ndarray]:
  """The model's float logits and the labels over (images, labels) batches, or (images, labels,
  weights) batches whose weight-0 rows are padding and are left out. The model runs as one
  traced graph: an eager Keras call costs several times the forward pass itself (and Keras'
  own predict_on_batch was slower still here)."""
  predict = tf.function(lambda images: model(images, training=False), autograph=False,
                        input_signature=[batches.element_spec[0]])
  logits, labels = [], []
  for batch in batches:
    images, batch_labels = batch[0], batch[1].numpy().reshape(-1)
    batch_logits = predict(images).numpy().astype(np.float32)
    if len(batch) > 2:
      keep = batch[2].numpy().reshape(-1) > 0
      batch_logits, batch_labels = batch_logits[keep], batch_labels[keep]
    logits.append(batch_logits)
    labels.append(batch_labels)
  if not logits or not sum(len(l) for l in labels):
    raise TemperatureFitError("The eval split is empty; there is nothing to fit the "
                              "temperature on.")
  return np.concatenate(logits), np.concatenate(labels)


def batch_images(batches: tf.data.Dataset) -> np.ndarray:
  """The images of (images, labels[, weights]) batches, in model_logits' order, without the
  weight-0 padding rows."""
  images = []
  for batch in batches:
    kept = batch[0].numpy()
    if len(batch) > 2:
      kept = kept[batch[2].numpy().reshape(-1) > 0]
    images.append(kept)
  return np.concatenate(images) if images else np.zeros((0,) + tuple(
      batches.element_spec[0].shape[1:]), np.float32)


def penultimate_model(model) -> "keras.Model":
  """A model mapping `model`'s input to the features its logits layer reads (the output of its
  one global average pooling), sharing its weights."""
  import tf_keras as keras
  pooling = [layer for layer in model.layers
             if isinstance(layer, keras.layers.GlobalAveragePooling2D)]
  if len(pooling) != 1:
    raise TemperatureFitError(
        f"A fit by feature distance needs a network with one global average pooling before its "
        f"logits (a Wide ResNet); {model.name} has {len(pooling)}.")
  return keras.Model(model.inputs, pooling[0].output)


def feature_support(features_model, train_batches: tf.data.Dataset,
                    eval_batches: tf.data.Dataset,
                    feature_widths: Optional[Sequence[int]] = None) -> Support:
  """support_from_features of the features `features_model` gives on the two splits; with
  `feature_widths` (an ensemble's members' features side by side), the union of each block's
  own support."""
  train_features, train_labels = model_logits(features_model, train_batches)
  eval_features = model_logits(features_model, eval_batches)[0]
  if not feature_widths or len(feature_widths) == 1:
    return support_from_features(train_features, train_labels, eval_features)
  if sum(feature_widths) != train_features.shape[1]:
    raise ValueError(f"Feature blocks of widths {list(feature_widths)} do not cover the "
                     f"{train_features.shape[1]} features.")
  starts = np.cumsum([0] + list(feature_widths[:-1]))
  return tuple(support_from_features(train_features[:, s:s + w], train_labels,
                                     eval_features[:, s:s + w], int(s))
               for s, w in zip(starts, feature_widths))

