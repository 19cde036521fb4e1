"""The exported model serves tf.Examples and raw image bytes alike, and survives bad bytes."""
import io

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from PIL import Image

from tests.transform_runs import raw_digit_examples, run_transform
from trainer_module.config import TrainerConfig
from trainer_module.export import export_serving_model, float32_model, read_precision_info
from trainer_module.model import wide_resnet

SERVED_TEMPERATURE = 2.5


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """(export dir, the model as trained: under mixed_bfloat16)."""
  work = tmp_path_factory.mktemp("serving")
  _, transform_dir = run_transform(raw_digit_examples(8), TrainerConfig().transform_options(),
                                   str(work / "transform"),
                                   ["--direct_running_mode=in_memory"])
  config = TrainerConfig(depth=10, width_multiplier=1)
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    trained = wide_resnet(config)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  export_dir = str(work / "model")
  export_serving_model(float32_model(trained, config), tft.TFTransformOutput(transform_dir),
                       export_dir, calibration={"temperature": SERVED_TEMPERATURE},
                       precision={"policy": "mixed_bfloat16", "reason": "asked for"})
  return export_dir, trained


@pytest.fixture(scope="module")
def served(exported):
  return tf.saved_model.load(exported[0])


def test_a_bfloat16_trained_model_is_served_in_float32_and_says_what_it_trained_in(exported,
                                                                                    served):
  export_dir, trained = exported
  assert read_precision_info(export_dir) == {"policy": "mixed_bfloat16", "reason": "asked for",
                                             "serving_policy": "float32"}
  copy = float32_model(trained, TrainerConfig(depth=10, width_multiplier=1))
  assert {layer.compute_dtype for layer in copy.layers} == {"float32"}
  for expected, actual in zip(trained.get_weights(), copy.get_weights()):
    np.testing.assert_array_equal(actual, expected)
  images = np.random.default_rng(0).normal(size=(4, 32, 32, 3)).astype(np.float32)
  np.testing.assert_allclose(copy(images), trained(images), atol=0.1)  # bf16 has 8 bits.
  result = served.signatures["serving_default"](
      examples=tf.constant([_example(raw["image"]) for raw in raw_digit_examples(2)]))
  assert result["probabilities"].dtype == tf.float32
  assert result["uncalibrated_probabilities"].dtype == tf.float32


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
