"""Transform: decoding, and normalisation statistics that equal numpy's on the same data."""
import io
import tempfile

import numpy as np
import tensorflow as tf
from PIL import Image
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from components.image_sources import encode_png
from trainer_module import image_format, preprocessing
from trainer_module.features import IMAGE_SHAPE

_RAW_SPEC = {"image": tf.io.FixedLenFeature([], tf.string),
             "label": tf.io.FixedLenFeature([], tf.int64)}


def _random_images(count, seed):
  rng = np.random.default_rng(seed)
  # Channels with different brightness and spread, so a per-image or global statistic fails.
  scale = np.array([60, 120, 200])
  offset = np.array([10, 40, 0])
  return (rng.random((count,) + IMAGE_SHAPE) * scale + offset).astype(np.uint8)


def _analyze_and_transform(images):
  raw = [{"image": encode_png(image), "label": i % 10} for i, image in enumerate(images)]
  metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(_RAW_SPEC))
  with tempfile.TemporaryDirectory() as temp_dir, tft_beam.Context(
      temp_dir=temp_dir, force_tf_compat_v1=preprocessing.FORCE_TF_COMPAT_V1):
    (transformed, _), _ = ((raw, metadata)
                           | tft_beam.AnalyzeAndTransformDataset(preprocessing.preprocessing_fn))
  return transformed


def test_normalisation_uses_full_pass_per_channel_mean_and_std_like_numpy():
  images = _random_images(24, seed=1)
  transformed = _analyze_and_transform(images)
  pixels = images.astype(np.float64) / 255.0
  mean = pixels.reshape(-1, 3).mean(axis=0)
  std = pixels.reshape(-1, 3).std(axis=0)
  expected = (pixels - mean) / std
  actual = np.stack([np.asarray(row["image"]).reshape(IMAGE_SHAPE) for row in transformed])
  np.testing.assert_allclose(actual, expected, atol=1e-4)
  flat = actual.reshape(-1, 3)
  np.testing.assert_allclose(flat.mean(axis=0), 0.0, atol=1e-4)
  np.testing.assert_allclose(flat.std(axis=0), 1.0, atol=1e-4)
  assert [row["label"] for row in transformed] == [i % 10 for i in range(24)]


def test_decode_images_keeps_pixels_and_batch_order():
  images = _random_images(3, seed=2)
  decoded = preprocessing.decode_images(tf.constant([encode_png(i) for i in images])).numpy()
  np.testing.assert_array_equal(decoded, images)


def test_denormalize_inverts_normalize_exactly_for_uint8_images():
  images = _random_images(4, seed=3)
  mean, std = tf.constant([0.2, 0.5, 0.7]), tf.constant([0.1, 0.3, 0.05])
  normalized = preprocessing.normalize(tf.cast(images, tf.float32) / 255.0, mean, std)
  np.testing.assert_array_equal(preprocessing.denormalize_to_uint8(normalized, mean, std), images)


def test_decode_images_resizes_any_other_size_and_mode_as_the_image_folder_ingest_does():
  pngs = []
  for shape in [(28, 41, 3), (90, 60), (64, 64, 4)]:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, shape, np.uint8)).save(
        buffer, format="PNG")
    pngs.append(buffer.getvalue())
  decoded = preprocessing.decode_images(tf.constant(pngs)).numpy()
  assert decoded.shape == (3, 32, 32, 3)
  for png, image in zip(pngs, decoded):
    np.testing.assert_array_equal(image, image_format.decode_to_model_input(png).numpy())
    # An independent reference: PIL's RGB conversion (grey copied, alpha dropped) and its
    # bilinear resize, which filters over the scaled footprint as antialiasing does.
    reference = np.asarray(Image.open(io.BytesIO(png)).convert("RGB").resize(
        (32, 32), Image.BILINEAR)).astype(int)
    assert np.abs(image.astype(int) - reference).max() <= 2
  assert (decoded[1, ..., 0] == decoded[1, ..., 1]).all()  # The grey image stays grey.
