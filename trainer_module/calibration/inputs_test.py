"""The held-out sets: the validation corruptions of the eval images, repeatable."""
import numpy as np
import pytest
import tensorflow as tf

from test_support.tiny_config import plain_trainer
from trainer_module import reference_corruptions
from trainer_module.calibration import maths
from trainer_module.calibration.inputs import (VALIDATION_CORRUPTIONS, channel_statistics,
                                               validation_corrupted_set)


def test_channel_statistics_read_back_transforms_mean_and_std(tmp_path):
  """From a real transform graph (TF1-traced, as Transform writes it), in eager mode."""
  import tensorflow_transform as tft
  from test_support.transform_runs import raw_digit_examples, run_transform
  from trainer_module.preprocessing import decode_images
  raw = raw_digit_examples(8)
  _, transform_dir = run_transform(raw, plain_trainer().transform_options(), str(tmp_path),
                                   ["--direct_running_mode=in_memory"])
  mean, std = channel_statistics(tft.TFTransformOutput(transform_dir))
  pixels = decode_images(tf.constant([r["image"] for r in raw])).numpy().reshape(-1, 3) / 255.0
  np.testing.assert_allclose(mean.numpy(), pixels.mean(axis=0), atol=1e-5)
  np.testing.assert_allclose(std.numpy(), pixels.std(axis=0), rtol=1e-4)


def test_validation_corrupted_batches_are_every_validation_slice_repeatable_in_any_order():
  rng = np.random.default_rng(9)
  mean, std = np.array([0.2, 0.3, 0.4], np.float32), np.array([0.25, 0.2, 0.3], np.float32)
  pixels = rng.integers(0, 256, (7, 32, 32, 3)).astype(np.uint8)
  images = (pixels.astype(np.float32) / 255.0 - mean) / std
  labels, weights = np.arange(7), np.ones(7, np.float32)  # Each image its own label.
  batches = tf.data.Dataset.from_tensor_slices((images, labels, weights)).batch(3)
  corrupted, slices = validation_corrupted_set(batches, mean, std, 2, 8)
  reversed_batches = tf.data.Dataset.from_tensor_slices(
      (images[::-1], labels[::-1], weights[::-1])).batch(4)
  again, _ = validation_corrupted_set(reversed_batches, mean, std, 2, 8)
  assert list(slices[:4]) == ["speckle_noise_1"] * 2 + ["speckle_noise_2"] * 2
  assert len(set(slices)) == len(VALIDATION_CORRUPTIONS) * 5
  assert all(list(slices).count(name) == 2 for name in set(slices))
  first_images = np.concatenate([b[0].numpy() for b in corrupted])
  first_labels = np.concatenate([b[1].numpy() for b in corrupted])
  assert len(first_labels) == 2 * len(VALIDATION_CORRUPTIONS) * 5
  np.testing.assert_array_equal(first_images, np.concatenate([b[0].numpy() for b in again]))
  np.testing.assert_array_equal(first_labels, np.concatenate([b[1].numpy() for b in again]))
  pixels01 = first_images * std + mean
  assert pixels01.min() >= -1e-5 and pixels01.max() <= 1 + 1e-5
  # Two eval images, chosen by a hash of their pixels (images 4 and 0 of these seven, in the
  # order of their keys), the same two in every slice, each with its own label.
  slices = first_images.reshape(len(VALIDATION_CORRUPTIONS) * 5, 2, 32, 32, 3)
  assert not np.allclose(slices[0], slices[-1], atol=1e-3), "different corruptions differ"
  np.testing.assert_array_equal(first_labels.reshape(-1, 2),
                                np.tile([4, 0], (len(VALIDATION_CORRUPTIONS) * 5, 1)))
  assert not set(VALIDATION_CORRUPTIONS) & set(
      reference_corruptions.BENCHMARK_CORRUPTIONS), "no evaluated corruption tunes T"


def test_validation_corrupted_batches_of_an_empty_eval_split_fail():
  mean, std = np.zeros(3, np.float32), np.ones(3, np.float32)
  empty = tf.data.Dataset.from_tensor_slices((np.zeros((0, 32, 32, 3), np.float32),
                                              np.zeros(0, np.int64))).batch(4)
  with pytest.raises(maths.TemperatureFitError, match="eval split is empty"):
    validation_corrupted_set(empty, mean, std, 2, 8)
