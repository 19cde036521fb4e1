"""The exported model serves tf.Examples and raw image bytes alike, takes JPEG or PNG of any
size and colour mode (resized as the image_dir ingest resizes), answers with class names, and
fails a bad request with InvalidArgument before decoding anything it would refuse."""
import io
import json
import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from PIL import Image

from components import image_folder, image_sources
from test_support import image_folders
from test_support.mutation_runs import per_test_while_mapping
from test_support.tfrecord_inputs import png_bomb
from test_support.tiny_config import TINY_NETWORK, plain_trainer
from test_support.transform_runs import digits_transform_dir, raw_digit_examples
from trainer_module.calibration import model_outputs, record, registry
from trainer_module.calibration.distances import distance_scores, support_from_features
from trainer_module.class_names import CLASS_NAMES_FILE
from trainer_module.export import PRECISION_FILE, export_serving_model, float32_model, read_record
from trainer_module.model import wide_resnet

SERVED_TEMPERATURE = 2.5
CLASS_NAMES = tuple(f"class {digit}" for digit in range(10))
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def transform_dir():
  return digits_transform_dir()


@pytest.fixture(scope=per_test_while_mapping)
def exported(tmp_path_factory, transform_dir):
  """(export dir, the model as trained: under mixed_bfloat16)."""
  work = tmp_path_factory.mktemp("serving")
  config = plain_trainer(**TINY_NETWORK)
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    trained = wide_resnet(config)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  export_dir = str(work / "model")
  export_serving_model(float32_model(trained, config), tft.TFTransformOutput(transform_dir),
                       export_dir, calibration={"temperature": SERVED_TEMPERATURE},
                       records={PRECISION_FILE: {"policy": "mixed_bfloat16", "reason": "asked for",
                                                "serving_policy": "float32"}},
                       class_names=CLASS_NAMES)
  return export_dir, trained


@pytest.fixture(scope=per_test_while_mapping)
def served(exported):
  return tf.saved_model.load(exported[0])


def test_a_bfloat16_trained_model_is_served_in_float32_and_says_what_it_trained_in(exported,
                                                                                    served):
  export_dir, trained = exported
  assert read_record(export_dir, PRECISION_FILE) == {
      "policy": "mixed_bfloat16",
      "reason": "asked for",
      "serving_policy": "float32"
  }
  copy = float32_model(trained, plain_trainer(**TINY_NETWORK))
  assert {layer.compute_dtype for layer in copy.layers} == {"float32"}
  for expected, actual in zip(trained.get_weights(), copy.get_weights()):
    np.testing.assert_array_equal(actual, expected)
  images = np.random.default_rng(0).normal(size=(4, 32, 32, 3)).astype(np.float32)
  np.testing.assert_allclose(copy(images), trained(images), atol=0.1)  # bf16 has 8 bits.
  result = served.signatures["serving_default"](
      examples=tf.constant([_example(raw["image"]) for raw in raw_digit_examples(2)]))
  assert result["probabilities"].dtype == tf.float32
  assert result["uncalibrated_probabilities"].dtype == tf.float32


def test_a_float32_copy_is_made_only_of_a_mixed_model_and_the_policy_is_left_as_found(
    exported):
  """The Trainer exports inside its run's (mixed) policy, which must hold after the copy."""
  _, trained = exported
  config = plain_trainer(**TINY_NETWORK)
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    copy = float32_model(trained, config)
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
  finally:
    keras.mixed_precision.set_global_policy("float32")
  assert copy is not trained and float32_model(copy, config) is copy


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


# Both signatures' bomb requests in one fresh process, which has decoded nothing before: the
# peak resident memory (Linux's VmHWM, reset before each step through /proc/self/clear_refs)
# rises by what a step decodes. Freed decode memory stays with the process, so once a bomb has
# been decoded, a later decode shows no rise. Hence the order: each signature is warmed up, then
# each request's rise is measured, and one bomb decoded last shows that the measurement sees a
# decode. The control, coming last, also vouches for every request before it: had any request
# decoded a bomb, the control would reuse that memory and rise by nothing. So a signature that
# decodes fails its own test, by its own rise when it is the first to decode, else by the
# control (which then fails the other signature's test too: its measurement is blind).
# The process imports TensorFlow and the bomb's maker only: the good image and each signature's
# input name come as arguments (importing this module would cost a quarter of its CPU).
_BOMB_REQUESTS = """
import json, sys
import tensorflow as tf
from test_support.tfrecord_inputs import png_bomb

def peak_rise_mb(step):
  def high_water_mark_mb():
    with open("/proc/self/status") as f:
      return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
  start = high_water_mark_mb()
  outcome = step()
  return outcome, high_water_mark_mb() - start

def example(png):
  feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

def request(signature, images):
  if signature == "serving_default":
    images = [example(png) for png in images]
  try:
    served.signatures[signature](**{inputs[signature]: tf.constant(images)})
  except tf.errors.InvalidArgumentError as error:
    return error.message
  return "served"

export_dir, good_path, inputs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
served = tf.saved_model.load(export_dir)
with open(good_path, "rb") as f:
  good = f.read()
bomb = png_bomb(12000, 12000)
for signature in inputs:
  request(signature, [good])  # Warm: the first call sets up the graph's kernels.
requests = {signature: peak_rise_mb(lambda: request(signature, [good, bomb, bomb]))
            for signature in inputs}
_, decode_rise = peak_rise_mb(lambda: tf.io.decode_png(bomb, channels=3).shape)
print(json.dumps({signature: [error, request_rise, decode_rise]
                  for signature, (error, request_rise) in requests.items()}))
"""


@pytest.fixture(scope=per_test_while_mapping)
def bomb_requests(exported, tmp_path_factory):
  """{signature: (its error for [good, bomb, bomb], the peak memory's rise in MB for it, then
  for one bomb decoded after both requests)}, both signatures in one fresh process."""
  good = tmp_path_factory.mktemp("bomb") / "good.png"
  good.write_bytes(raw_digit_examples(1)[0]["image"])
  process = subprocess.run(
      [sys.executable, "-c", _BOMB_REQUESTS, exported[0], str(good), json.dumps(_INPUT)],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert process.returncode == 0, process.stderr[-3000:]
  results = json.loads(process.stdout.strip().splitlines()[-1])
  assert set(results) == set(_INPUT)
  return results


@pytest.mark.parametrize("signature", ["serving_images", "serving_default"])
def test_a_decompression_bomb_is_refused_by_its_header_without_decoding(bomb_requests,
                                                                        signature):
  assert len(png_bomb(12000, 12000)) < 500_000  # 420 KB declaring 432 MB of pixels.
  error, request_rise_mb, decode_rise_mb = bomb_requests[signature]
  assert re.search(r"declares too many pixels .* at batch positions\] \[1 2\] \[declared "
                   r"widths\] \[12000 12000\]", error), error
  assert request_rise_mb < 100, f"{request_rise_mb:.0f} MB: two bombs decoded take 864 MB"
  assert decode_rise_mb > 400, (f"{decode_rise_mb:.0f} MB for one bomb decoded after both "
                                "requests: the measurement is blind, or a request decoded one")


def _jpeg_declaring(width, height):
  """A small JPEG whose SOF0 marker declares width x height pixels."""
  data = bytearray(_encoded((16, 16, 3), "JPEG"))
  sof = data.index(b"\xff\xc0")
  data[sof + 5:sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
  return bytes(data)


def test_a_jpeg_declaring_too_many_pixels_is_refused_by_its_header(served):
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"declares too many pixels .* at batch positions\] \[1\] \[declared "
                           r"widths\] \[30000\] \[declared heights\] \[20000\]"):
    served.signatures["serving_images"](images=tf.constant(
        [raw_digit_examples(1)[0]["image"], _jpeg_declaring(30000, 20000)]))


_INPUT = {"serving_images": "images", "serving_default": "examples"}


def _model_input_png(encoded):
  """The 32x32 PNG the image_dir ingest stores for an image file."""
  return image_sources.encode_png(image_folder.model_input(encoded))


def test_a_camera_jpeg_and_its_ingested_png_get_the_same_answer_with_the_class_name(served,
                                                                                   exported):
  photos = [image_folders.jpeg((480, 360), colour, seed) for seed, colour in
            enumerate(image_folders.CLASS_COLOURS.values())]
  from_photos = served.signatures["serving_images"](images=tf.constant(photos))
  from_pngs = served.signatures["serving_images"](
      images=tf.constant([_model_input_png(photo) for photo in photos]))
  np.testing.assert_array_equal(from_photos["probabilities"], from_pngs["probabilities"])
  np.testing.assert_array_equal(from_photos["class_names"],
                                [CLASS_NAMES[k].encode() for k in from_photos["class_ids"]])
  assert read_record(exported[0], CLASS_NAMES_FILE) == {"class_names": list(CLASS_NAMES)}


def _brightness_model(num_classes, bright_class, dark_class):
  """Logits of a linear model of the image's mean: a white image scores `bright_class`
  highest, a black one `dark_class`."""
  model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                            keras.layers.Dense(num_classes)])
  kernel = np.zeros((32 * 32 * 3, num_classes), np.float32)
  kernel[:, bright_class], kernel[:, dark_class] = 1.0 / kernel.shape[0], -1.0 / kernel.shape[0]
  model.layers[-1].set_weights([kernel, np.zeros(num_classes, np.float32)])
  return model


@pytest.mark.parametrize("names,bright,dark", [
    (("zebra", "ant", "moth"), 0, 2),  # Sorted, index 0 would be "ant" and 2 "zebra".
    (tuple(str(index) for index in range(11)), 10, 3),  # Sorted, "10" comes before "2".
], ids=["unsorted-names", "eleven-numbered-classes"])
def test_each_served_answer_carries_the_name_of_its_class_index(transform_dir, tmp_path, names,
                                                                 bright, dark):
  export_dir = str(tmp_path / "model")
  export_serving_model(_brightness_model(len(names), bright, dark),
                       tft.TFTransformOutput(transform_dir), export_dir, class_names=names)
  assert read_record(export_dir, CLASS_NAMES_FILE) == {"class_names": list(names)}
  served = tf.saved_model.load(export_dir)
  pngs = [image_sources.encode_png(np.full((32, 32, 3), value, np.uint8)) for value in (255, 0)]
  for result in (served.signatures["serving_images"](images=tf.constant(pngs)),
                 served.signatures["serving_default"](
                     examples=tf.constant([_example(png) for png in pngs]))):
    assert result["class_ids"].numpy().tolist() == [bright, dark]
    # Without calibration the temperature is 1: the probabilities are the logits' softmax.
    np.testing.assert_allclose(result["probabilities"], result["uncalibrated_probabilities"],
                               rtol=1e-6)
    assert np.ptp(result["probabilities"].numpy()[0]) > 0.01  # The white image's logits differ.
    assert [name.decode() for name in result["class_names"].numpy()] == [names[bright],
                                                                        names[dark]]


def test_class_names_not_one_per_class_are_refused_saying_both_counts(transform_dir, tmp_path):
  export_dir = tmp_path / "model"
  with pytest.raises(ValueError, match=r"^3 class names for a model of 11 classes\.$"):
    export_serving_model(_brightness_model(11, 10, 3), tft.TFTransformOutput(transform_dir),
                         str(export_dir), class_names=("zebra", "ant", "moth"))
  assert not export_dir.exists()


@pytest.mark.parametrize("payload", [
    _encoded((32, 32, 3), "JPEG"), _encoded((28, 28, 3), "PNG"), _encoded((32, 32), "PNG"),
    _encoded((32, 32, 4), "PNG"), _encoded((640, 480, 3), "JPEG"),
    image_folders.encode(image_folders.photo((0, 0, 255), (50, 40), 0), "JPEG", "CMYK"),
    image_folders.encode(image_folders.photo((0, 0, 255), (50, 40), 0), "PNG", "P"),
], ids=["jpeg", "28x28", "grayscale", "rgba", "640x480-jpeg", "cmyk-jpeg", "palette-png"])
def test_any_jpeg_or_png_within_the_bound_is_answered(served, payload):
  result = served.signatures["serving_images"](images=tf.constant([payload]))
  assert result["probabilities"].shape == (1, 10)
  assert result["class_names"].numpy()[0].decode() in CLASS_NAMES


def _png_declaring(width, height):
  """A small PNG whose IHDR declares width x height pixels, its CRC mended."""
  data = bytearray(_encoded((16, 16, 3), "PNG"))
  data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
  data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
  return bytes(data)


@pytest.mark.parametrize("payload, message", [
    (b"not an image", r"Not a JPEG or PNG image .* at batch positions\] \[1\]"),
    (b"", r"Not a JPEG or PNG image .* at batch positions\] \[1\]"),
    (_encoded((32, 32, 3), "GIF"), r"Not a JPEG or PNG image"),
    (_encoded((32, 32, 3), "BMP"), r"Not a JPEG or PNG image"),
    (image_folders.jpeg()[:3000], r"JPEG image truncated .* at batch positions\] \[1\]"),
    (image_folders.jpeg()[:300], r"JPEG image unreadable .* at batch positions\] \[1\]"),
    (_jpeg_declaring(0, 16), r"JPEG image unreadable .* at batch positions\] \[1\]"),
    (_png_declaring(0, 16), r"Image declares no pixels .* at batch positions\] \[1\]"),
    (_encoded((32, 32, 3), "PNG")[:-20], r"PNG image truncated .* at batch positions\] \[1\]"),
], ids=["garbage", "empty-bytes", "gif", "bmp", "truncated-jpeg", "jpeg-cut-in-its-header",
        "zero-width-jpeg", "zero-width-png", "truncated-png"])
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


@pytest.mark.parametrize("signature", ["serving_images", "serving_default"])
def test_a_png_with_bytes_after_its_end_is_answered_as_the_ingest_reads_it(served, signature):
  """A PNG decoder stops at the IEND chunk; some tools leave bytes after it. The image_dir
  ingest reads such a file, so serving answers it, as it answers the file without them."""
  png = _encoded((32, 32, 3), "PNG")
  requests = [png, png + b"\x00\x00", png + b"trailing bytes " * 100]
  np.testing.assert_array_equal(image_folder.model_input(requests[1]),
                                image_folder.model_input(png))
  if signature == "serving_default":
    requests = [_example(image) for image in requests]
  probabilities = served.signatures[signature](
      **{_INPUT[signature]: tf.constant(requests)})["probabilities"].numpy()
  np.testing.assert_array_equal(probabilities[1:], probabilities[[0, 0]])


@pytest.mark.parametrize("signature", ["serving_images", "serving_default"])
def test_a_request_that_is_not_one_batch_of_inputs_is_refused_saying_what_the_signature_takes(
    served, signature):
  good = raw_digit_examples(1)[0]["image"]
  good = _example(good) if signature == "serving_default" else good
  for wrong in ([[good], [good]], good):  # Rank 2 and rank 0.
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"{signature} takes a 1-D batch of .* \(shape \[batch\]\)"):
      served.signatures[signature](**{_INPUT[signature]: tf.constant(wrong)})


@pytest.mark.parametrize("payload", [b"\xff\xfe\x80 not a proto", b"\x0a\x05\xff\xfe",
                                     tf.train.Example().SerializeToString()],
                         ids=["garbage", "truncated", "no-image"])
def test_a_bad_serialized_example_is_an_invalid_argument_naming_its_position(served, payload):
  good = _example(raw_digit_examples(1)[0]["image"])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"Not a serialized tf.Example with one bytes value in feature image "
                           r"at batch positions\] \[1\]"):
    served.signatures["serving_default"](examples=tf.constant([good, payload, good]))


def test_a_request_with_many_bad_examples_names_the_first_ten_of_their_positions(served):
  good = _example(raw_digit_examples(1)[0]["image"])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"at batch positions\] \[1 2 3 4 5 6 7 8 9 10\.\.\.\]"):
    served.signatures["serving_default"](examples=tf.constant([good] + [b"not a proto"] * 12))


@pytest.mark.parametrize("signature", ["serving_images", "serving_default"])
def test_an_empty_batch_gets_empty_outputs(served, signature):
  result = served.signatures[signature](**{_INPUT[signature]: tf.constant([], tf.string)})
  assert result["probabilities"].shape == (0, 10)
  assert result["class_ids"].shape == (0,)
  assert result["class_names"].shape == (0,)
  assert {name: value.shape[0] for name, value in result.items()} == dict.fromkeys(result, 0)


def test_distance_detail_curve_serves_each_inputs_detail_and_t_as_numpy_computes_them(
    tmp_path, transform_dir):
  """The served graph computes each input's distance score as the calibration package's numpy
  does, reads the transformed image itself for its detail score (a blurred digit scores lower
  than the digit, and noise higher), and serves each input the numpy map's T; the support's
  arrays are written beside the model for numpy to read."""
  from scipy import ndimage
  from trainer_module.calibration import detail
  keras.utils.set_random_seed(5)
  model = wide_resnet(plain_trainer(**TINY_NETWORK))
  tft_output = tft.TFTransformOutput(transform_dir)
  digits = raw_digit_examples(160)
  pngs = [raw["image"] for raw in digits]
  grey_digit = tf.io.decode_png(pngs[150]).numpy()
  blurred = np.clip(ndimage.gaussian_filter(grey_digit.astype(float), (1.5, 1.5, 0)), 0, 255)
  noisy = np.clip(grey_digit + np.random.default_rng(2).normal(0, 40, grey_digit.shape), 0, 255)
  pngs += [tf.io.encode_png(image.astype(np.uint8)).numpy() for image in (blurred, noisy)]
  transformed = tft_output.transform_features_layer()({"image": tf.constant(pngs)})["image"]
  features = model_outputs.penultimate_model(model)(transformed).numpy()
  support = support_from_features(
      features[:120], np.array([raw["label"] for raw in digits[:120]]), features[120:150])
  scale = detail.detail_scale(transformed.numpy()[120:150])
  info = {"temperature_fit": "distance_detail_curve", "temperature": float(np.exp(-0.7)),
          "feature_support": support, "support_radius": support.radius,
          "detail_scale": scale._asdict(),
          "distance_curve": {"log_temperature": -0.7, "slope": 0.4, "detail_slope": -0.3}}
  export_serving_model(model, tft_output, str(tmp_path), calibration=info)
  assert "feature_support" not in record.read_calibration_info(str(tmp_path))
  assert record.read_feature_support(str(tmp_path)).log_distance_std == pytest.approx(
      support.log_distance_std)
  served = tf.saved_model.load(str(tmp_path))
  result = served.signatures["serving_images"](images=tf.constant(pngs[150:]))
  images = transformed.numpy()[150:]
  # The logits served are the network's, not the features it also computes for the distances.
  np.testing.assert_allclose(result["uncalibrated_probabilities"],
                             tf.nn.softmax(model(images, training=False)), rtol=1e-3, atol=1e-5)
  # The graph computes the features with other kernels than eager Keras: float32 rounding.
  np.testing.assert_allclose(result["distance_score"], distance_scores(features[150:], support),
                             rtol=1e-3, atol=2e-3)
  np.testing.assert_allclose(result["detail_score"], detail.detail_scores(images, scale),
                             rtol=1e-4, atol=1e-4)
  digit_detail, blurred_detail, noisy_detail = result["detail_score"].numpy()[[0, -2, -1]]
  assert blurred_detail < digit_detail < noisy_detail
  expected_t = registry.served_calibration(
      record.read_calibration_info(str(tmp_path)), record.read_feature_support(str(tmp_path)),
      features[150:], images)
  log_raw = np.log(result["uncalibrated_probabilities"].numpy().astype(np.float64))
  expected = np.exp(log_raw / expected_t[:, np.newaxis])
  np.testing.assert_allclose(result["probabilities"], expected / expected.sum(1, keepdims=True),
                             rtol=1e-3, atol=1e-5)
  empty = served.signatures["serving_default"](examples=tf.constant([], tf.string))
  assert empty["detail_score"].shape == (0,) and empty["distance_score"].shape == (0,)
