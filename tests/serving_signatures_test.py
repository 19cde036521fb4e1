"""The exported model serves tf.Examples and raw PNG bytes alike, accepts what training accepts,
and fails a bad request with InvalidArgument before decoding anything it would refuse."""
import io
import resource
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from PIL import Image

from testing.tfrecord_inputs import png_bomb
from testing.transform_runs import raw_digit_examples, run_transform
from trainer_module.calibration import model_outputs, record, registry
from trainer_module.calibration.distances import (FeatureSupport, class_statistics, distance_scores,
                                                  mahalanobis_distance, support_from_features)
from trainer_module.config import TrainerConfig
from trainer_module.export import PRECISION_FILE, export_serving_model, float32_model, read_record
from trainer_module.model import wide_resnet

SERVED_TEMPERATURE = 2.5


@pytest.fixture(scope="module")
def transform_dir(tmp_path_factory):
  _, output = run_transform(raw_digit_examples(8), TrainerConfig().transform_options(),
                            str(tmp_path_factory.mktemp("transform")),
                            ["--direct_running_mode=in_memory"])
  return output


@pytest.fixture(scope="module")
def exported(tmp_path_factory, transform_dir):
  """(export dir, the model as trained: under mixed_bfloat16)."""
  work = tmp_path_factory.mktemp("serving")
  config = TrainerConfig(depth=10, width_multiplier=1)
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    trained = wide_resnet(config)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  export_dir = str(work / "model")
  export_serving_model(float32_model(trained, config), tft.TFTransformOutput(transform_dir),
                       export_dir, calibration={"temperature": SERVED_TEMPERATURE},
                       records={PRECISION_FILE: {"policy": "mixed_bfloat16", "reason": "asked for",
                                                "serving_policy": "float32"}})
  return export_dir, trained


@pytest.fixture(scope="module")
def served(exported):
  return tf.saved_model.load(exported[0])


def test_a_bfloat16_trained_model_is_served_in_float32_and_says_what_it_trained_in(exported,
                                                                                    served):
  export_dir, trained = exported
  assert read_record(export_dir, PRECISION_FILE) == {"policy": "mixed_bfloat16", "reason": "asked for",
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


def _peak_rss_mb():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("signature", ["serving_images", "serving_default"])
def test_a_decompression_bomb_is_refused_by_its_header_without_decoding(served, signature):
  bomb = png_bomb(12000, 12000)  # 420 KB declaring 432 MB of pixels.
  assert len(bomb) < 500_000
  good = raw_digit_examples(1)[0]["image"]
  requests = [good, bomb, bomb]
  if signature == "serving_default":
    requests = [_example(png) for png in requests]
  before = _peak_rss_mb()
  started = time.time()
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"declares another size .* at batch positions\] \[1 2\] \[declared "
                           r"widths\] \[12000 12000\]"):
    served.signatures[signature](**{_INPUT[signature]: tf.constant(requests)})
  assert _peak_rss_mb() - before < 100, "three bombs decoded would take 1.3 GB"
  assert time.time() - started < 5


_INPUT = {"serving_images": "images", "serving_default": "examples"}


@pytest.mark.parametrize("payload, message", [
    (b"not an image", r"Not a PNG image .* at batch positions\] \[1\]"),
    (b"", r"Not a PNG image"),
    (_encoded((32, 32, 3), "JPEG"), r"Not a PNG image"),
    (_encoded((28, 28, 3), "PNG"), r"declared widths\] \[28\] \[declared heights\] \[28\]"),
    (_encoded((32, 32), "PNG"), r"not 8-bit RGB .*PNG colour types.*\] \[0\]"),
    (_encoded((32, 32, 4), "PNG"), r"not 8-bit RGB .*PNG colour types.*\] \[6\]"),
], ids=["garbage", "empty-bytes", "jpeg", "28x28", "grayscale", "rgba"])
@pytest.mark.parametrize("signature", ["serving_images", "serving_default"])
def test_images_training_would_refuse_fail_the_request_clearly_and_serving_goes_on(
    served, signature, payload, message):
  good = raw_digit_examples(1)[0]["image"]
  requests = [good, payload]
  if signature == "serving_default":
    requests = [_example(png) for png in requests]
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    served.signatures[signature](**{_INPUT[signature]: tf.constant(requests)})
  after = served.signatures[signature](**{_INPUT[signature]: tf.constant(requests[:1])})
  assert after["class_ids"].shape == (1,)


@pytest.mark.parametrize("payload", [b"\xff\xfe\x80 not a proto", b"\x0a\x05\xff\xfe",
                                     tf.train.Example().SerializeToString()],
                         ids=["garbage", "truncated", "no-image"])
def test_a_bad_serialized_example_is_an_invalid_argument_naming_its_position(served, payload):
  good = _example(raw_digit_examples(1)[0]["image"])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"Not a serialized tf.Example with one bytes value in feature image "
                           r"at batch positions\] \[1\]"):
    served.signatures["serving_default"](examples=tf.constant([good, payload, good]))


@pytest.mark.parametrize("signature", ["serving_images", "serving_default"])
def test_an_empty_batch_gets_empty_outputs(served, signature):
  result = served.signatures[signature](**{_INPUT[signature]: tf.constant([], tf.string)})
  assert result["probabilities"].shape == (0, 10)
  assert result["class_ids"].shape == (0,)


def test_in_support_serves_t_within_the_feature_radius_and_the_raw_softmax_beyond(
    tmp_path, transform_dir):
  keras.utils.set_random_seed(3)
  model = wide_resnet(TrainerConfig(depth=10, width_multiplier=1))
  tft_output = tft.TFTransformOutput(transform_dir)
  pngs = [raw["image"] for raw in raw_digit_examples(8)]
  transformed = tft_output.transform_features_layer()({"image": tf.constant(pngs)})["image"]
  features = model_outputs.penultimate_model(model)(transformed).numpy()
  means, precision = class_statistics(features, np.arange(8) % 2)
  distances = mahalanobis_distance(features, means, precision)
  support = FeatureSupport(means, precision, float(np.median(distances)))
  export_serving_model(model, tft_output, str(tmp_path), calibration={
      "temperature_fit": "in_support", "temperature": SERVED_TEMPERATURE,
      "feature_support": support, "support_radius": support.radius})
  assert "feature_support" not in record.read_calibration_info(str(tmp_path))
  served = tf.saved_model.load(str(tmp_path))
  result = served.signatures["serving_images"](images=tf.constant(pngs))
  inside = distances <= support.radius
  assert 0 < inside.sum() < 8
  log_raw = np.log(result["uncalibrated_probabilities"].numpy().astype(np.float64))
  expected = np.exp(log_raw / np.where(inside, SERVED_TEMPERATURE, 1.0)[:, np.newaxis])
  expected /= expected.sum(axis=1, keepdims=True)
  np.testing.assert_allclose(result["probabilities"], expected, rtol=1e-4, atol=1e-6)
  empty = served.signatures["serving_default"](examples=tf.constant([], tf.string))
  assert empty["probabilities"].shape == (0, 10)


def test_distance_curve_serves_each_inputs_own_t_as_the_numpy_calibrator_computes_it(
    tmp_path, transform_dir):
  """The exported graph's distance score and temperature equal temperature.py's numpy ones,
  input by input; the support's arrays are written beside the model for numpy to read."""
  keras.utils.set_random_seed(4)
  model = wide_resnet(TrainerConfig(depth=10, width_multiplier=1))
  tft_output = tft.TFTransformOutput(transform_dir)
  digits = raw_digit_examples(160)  # Enough to estimate the 64 features' covariance.
  pngs = [raw["image"] for raw in digits]
  noise = np.random.default_rng(1).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
  pngs += [tf.io.encode_png(image).numpy() for image in noise]
  transformed = tft_output.transform_features_layer()({"image": tf.constant(pngs)})["image"]
  features = model_outputs.penultimate_model(model)(transformed).numpy()
  support = support_from_features(
      features[:120], np.array([raw["label"] for raw in digits[:120]]), features[120:160])
  pngs, features = pngs[150:], features[150:]  # Digits the support did not see, and noise.
  info = {"temperature_fit": "distance_curve", "temperature": float(np.exp(-0.7)),
          "feature_support": support, "support_radius": support.radius,
          "distance_curve": {"log_temperature": -0.7, "slope": 0.4}}
  export_serving_model(model, tft_output, str(tmp_path), calibration=info)
  assert record.read_feature_support(str(tmp_path)).log_distance_std == pytest.approx(
      support.log_distance_std)
  result = tf.saved_model.load(str(tmp_path)).signatures["serving_images"](
      images=tf.constant(pngs))
  scores = distance_scores(features, support)
  # The graph computes the features with other kernels than eager Keras: float32 rounding.
  np.testing.assert_allclose(result["distance_score"], scores, rtol=1e-3, atol=2e-3)
  expected_t = registry.served_calibration(
      record.read_calibration_info(str(tmp_path)),
      record.read_feature_support(str(tmp_path)), features)
  assert expected_t.min() < 1 < expected_t.max()  # Sharpened near, softened far.
  log_raw = np.log(result["uncalibrated_probabilities"].numpy().astype(np.float64))
  expected = np.exp(log_raw / expected_t[:, np.newaxis])
  np.testing.assert_allclose(result["probabilities"], expected / expected.sum(1, keepdims=True),
                             rtol=1e-3, atol=1e-5)
  empty = tf.saved_model.load(str(tmp_path)).signatures["serving_default"](
      examples=tf.constant([], tf.string))
  assert empty["distance_score"].shape == (0,)
