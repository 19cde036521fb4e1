"""The exported model serves tf.Examples and raw image bytes alike, and survives bad bytes."""
import io

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from PIL import Image

from tests.transform_runs import raw_digit_examples, run_transform
from trainer_module.config import TrainerConfig
from trainer_module.export import export_serving_model
from trainer_module.model import wide_resnet

SERVED_TEMPERATURE = 2.5


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  work = tmp_path_factory.mktemp("serving")
  _, transform_dir = run_transform(raw_digit_examples(8), TrainerConfig().transform_options(),
                                   str(work / "transform"),
                                   ["--direct_running_mode=in_memory"])
  export_dir = str(work / "model")
  export_serving_model(wide_resnet(TrainerConfig(depth=10, width_multiplier=1)),
                       tft.TFTransformOutput(transform_dir), export_dir,
                       calibration={"temperature": SERVED_TEMPERATURE})
  return tf.saved_model.load(export_dir)


def _example(png):
  feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _encoded(shape, fmt):
  buffer = io.BytesIO()
  Image.fromarray(np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)).save(
      buffer, format=fmt)
  return buffer.getvalue()


def test_examples_and_raw_png_bytes_give_the_same_prediction(served):
  pngs = [raw["image"] for raw in raw_digit_examples(8)]
  from_examples = served.signatures["serving_default"](
      examples=tf.constant([_example(png) for png in pngs]))
  from_images = served.signatures["serving_images"](images=tf.constant(pngs))
  assert from_images["probabilities"].shape == (8, 10)
  np.testing.assert_allclose(from_images["probabilities"], from_examples["probabilities"],
                             rtol=1e-6)
  np.testing.assert_array_equal(from_images["class_ids"],
                                np.argmax(from_images["probabilities"], axis=1))
  np.testing.assert_allclose(np.sum(from_images["probabilities"], axis=1), 1.0, rtol=1e-5)


def test_the_fitted_temperature_is_baked_into_the_served_probabilities(served):
  pngs = [raw["image"] for raw in raw_digit_examples(8)]
  result = served.signatures["serving_default"](
      examples=tf.constant([_example(png) for png in pngs]))
  log_raw = np.log(result["uncalibrated_probabilities"].numpy().astype(np.float64))
  expected = np.exp(log_raw / SERVED_TEMPERATURE)
  expected /= expected.sum(axis=1, keepdims=True)
  np.testing.assert_allclose(result["probabilities"], expected, rtol=1e-4, atol=1e-6)
  np.testing.assert_array_equal(result["class_ids"], np.argmax(log_raw, axis=1))


def test_jpeg_bytes_are_served(served):
  result = served.signatures["serving_images"](images=tf.constant([_encoded((32, 32, 3),
                                                                            "JPEG")]))
  assert result["probabilities"].shape == (1, 10)


@pytest.mark.parametrize("payload, message", [
    (b"not an image", "Unknown image file format"),
    (_encoded((28, 28, 3), "PNG"), "28,28,3"),
])
def test_bad_image_bytes_fail_the_request_clearly_and_serving_goes_on(served, payload, message):
  good = raw_digit_examples(1)[0]["image"]
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    served.signatures["serving_images"](images=tf.constant([good, payload]))
  after = served.signatures["serving_images"](images=tf.constant([good]))
  assert after["class_ids"].shape == (1,)
