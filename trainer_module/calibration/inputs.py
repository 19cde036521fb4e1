"""The held-out sets a fit reads, made from the eval split (tf.data): its images under the
validation corruptions. The test split is never read."""
import hashlib
from typing import NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from trainer_module import reference_corruptions
from trainer_module.calibration.maths import TemperatureFitError
from trainer_module.calibration.method import VALIDATION_CORRUPTIONS, HeldOut


class ShiftedSet(NamedTuple):
  batches: tf.data.Dataset  # (images, labels) batches, in a fixed order.
  slices: np.ndarray  # Each example's slice name (corruption_severity), in the same order.


def channel_statistics(tft_output) -> Tuple[tf.Tensor, tf.Tensor]:
  """The per-channel mean and std that Transform normalises with, read back from its graph:
  a black and a white image normalise to -mean/std and (1 - mean)/std."""
  from trainer_module.features import IMAGE_KEY, IMAGE_SHAPE
  images = [tf.io.encode_png(tf.fill(IMAGE_SHAPE, tf.constant(value, tf.uint8)))
            for value in (0, 255)]
  layer = tft_output.transform_features_layer()  # What serving applies (TF1 graph, eager-safe).
  normalised = layer({IMAGE_KEY: tf.stack(images)})[IMAGE_KEY]
  black, white = normalised[0, 0, 0], normalised[1, 0, 0]
  std = 1.0 / (white - black)
  return -black * std, std


def validation_corrupted_set(eval_batches: tf.data.Dataset, mean: tf.Tensor, std: tf.Tensor,
                             per_slice: int, batch_size: int) -> ShiftedSet:
  """`per_slice` eval images (chosen by a hash of their key) under each validation corruption at
  each severity, made by tfds' corruption code (trainer_module/reference_corruptions.py) and
  normalised like the images, as (images, labels) batches with each example's slice name. An
  image's key is a hash of its pixels, so the same eval split gives the same set on every run,
  in any order."""
  from trainer_module.preprocessing import denormalize_to_uint8, normalize
  images, labels = [], []
  for batch in eval_batches:
    keep = batch[2].numpy().reshape(-1) > 0 if len(batch) > 2 else slice(None)
    images.append(denormalize_to_uint8(batch[0], mean, std).numpy()[keep])
    labels.append(batch[1].numpy().reshape(-1)[keep])
  if not sum(len(batch) for batch in labels):
    raise TemperatureFitError("The eval split is empty; there are no images to corrupt for "
                              "the temperature fit.")
  images, labels = np.concatenate(images), np.concatenate(labels)
  keys = [hashlib.sha256(image.tobytes()).hexdigest() for image in images]
  chosen = reference_corruptions.subsample(
      [(key, index, int(labels[index])) for index, key in enumerate(keys)], per_slice)
  slices = [(name, severity) for name in VALIDATION_CORRUPTIONS
            for severity in reference_corruptions.SEVERITIES]
  corrupted = list(reference_corruptions.corrupt_all(
      [(images[index], name, severity, key) for name, severity in slices
       for key, index, _ in chosen]))
  corrupted_labels = [label for _ in slices for _, _, label in chosen]
  slices = [f"{name}_{severity}" for name, severity in slices for _ in chosen]
  images01 = tf.constant(np.stack(corrupted), tf.float32) / 255.0
  return ShiftedSet(tf.data.Dataset.from_tensor_slices(
      (normalize(images01, mean, std), np.asarray(corrupted_labels, np.int64))).batch(batch_size),
                    np.asarray(slices))


def held_out_sets(method, eval_batches: tf.data.Dataset, tft_output, validation_examples: int,
                  batch_size: int, train_batches: Optional[tf.data.Dataset] = None) -> HeldOut:
  """The sets `method` reads (its needs_* properties), made from the eval split.
  train_batches: the train split's, for feature distances."""
  validation_corrupted = None
  if method.needs_validation_corruptions:
    validation_corrupted = validation_corrupted_set(eval_batches, *channel_statistics(tft_output),
                                                    validation_examples, batch_size)
  return HeldOut(eval_batches, validation_corrupted=validation_corrupted,
                 train_batches=train_batches if method.needs_feature_distances else None)
