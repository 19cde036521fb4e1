"""What the data check calls a bad image, and how it reports problems."""
import io
import os
import resource
import time

import numpy as np
from PIL import Image
from tfx.utils import io_utils

from components import data_check
from components.image_sources import encode_png, make_example
from components.data_check import example_key, format_problems, image_problem, key_problem
from testing.tfrecord_inputs import png_bomb
from trainer_module import image_format


def _png(shape):
  buffer = io.BytesIO()
  Image.fromarray(np.zeros(shape, np.uint8)).save(buffer, format="PNG")
  return buffer.getvalue()


def test_a_32x32_rgb_png_is_fine():
  assert image_problem(make_example("k", encode_png(np.zeros((32, 32, 3), np.uint8)), 1)) is None


def test_bytes_that_are_not_a_png_are_named():
  problem = image_problem(make_example("k", b"\x00garbage", 1))
  assert "not a PNG" in problem


def test_a_jpeg_is_not_accepted_as_png():
  buffer = io.BytesIO()
  Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(buffer, format="JPEG")
  assert "not a PNG" in image_problem(make_example("k", buffer.getvalue(), 1))


def test_wrong_sizes_and_kinds_are_named_from_the_header_as_serving_names_them():
  assert "'image' declares 28x28 pixels (expected an 8-bit RGB PNG of 32x32 pixels)" in (
      image_problem(make_example("k", _png((28, 28, 3)), 1)))
  assert "is a 8-bit grayscale PNG" in image_problem(make_example("k", _png((32, 32)), 1))
  assert "is a 8-bit RGBA PNG" in image_problem(make_example("k", _png((32, 32, 4)), 1))


def test_the_gate_and_serving_accept_and_refuse_the_same_images():
  for image in (_png((32, 32, 3)), _png((28, 28, 3)), _png((32, 32)), _png((32, 32, 4)),
                b"\x00garbage", b""):
    gate_accepts = image_problem(make_example("k", image, 1)) is None
    assert gate_accepts == (image_format.header_problem(image) is None)


def test_a_decompression_bomb_is_refused_by_its_header_without_decoding():
  bomb = png_bomb(12000, 12000)  # 420 KB declaring 432 MB of pixels.
  before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  started = time.time()
  problem = image_problem(make_example("k", bomb, 1))
  assert "declares 12000x12000 pixels" in problem and "not decoded" in problem
  assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before < 50
  assert time.time() - started < 1


def test_a_key_found_once_is_fine_twice_in_a_split_or_in_two_splits_is_named_with_its_files():
  assert key_problem("k", [("train", "a.gz")]) is None
  assert key_problem("k", [("train", "a.gz"), ("train", "b.gz")]) == (
      "train", "k", "a.gz in train, b.gz in train",
      "key appears 2 times in the split; keys must be unique")
  assert key_problem("k", [("test", "t.gz"), ("train", "a.gz")]) == (
      "test", "k", "t.gz in test, a.gz in train",
      "key is in splits test, train; a key must be in one split only")


def test_a_missing_image_is_named():
  example = make_example("k", b"", 1)
  del example.features.feature["image"]
  assert "has 0 values" in image_problem(example)


def test_example_key_falls_back_when_missing():
  example = make_example("digits-0042", b"", 1)
  assert example_key(example) == "digits-0042"
  del example.features.feature["key"]
  assert example_key(example) == "<no key>"


def test_report_lists_every_problem_and_how_many_were_left_out():
  message = format_problems(
      ["split 'train', feature 'label': Out-of-range values: ..."],
      [("eval", "bad-1", "data.gz", "'image' is not a PNG image")], num_bad_examples=3)
  assert "feature 'label': Out-of-range values" in message
  assert "split 'eval', example key 'bad-1' (file data.gz): 'image' is not a PNG image" in message
  assert "2 more bad examples or keys" in message


def test_an_example_that_breaks_an_anomalous_features_rule_is_named_with_the_rule():
  schema = io_utils.SchemaReader().read(os.path.join(os.path.dirname(data_check.__file__),
                                                     "schema.pbtxt"))
  label = [feature for feature in schema.feature if feature.name == "label"]
  png = encode_png(np.zeros((32, 32, 3), np.uint8))
  assert data_check.schema_problem(make_example("k", png, 3), label) is None
  assert data_check.schema_problem(make_example("k", png, 10), label) == (
      "feature 'label' is 10, outside the schema's domain [0, 9]")
  assert data_check.schema_problem(make_example("k", png, -1), label) == (
      "feature 'label' is -1, outside the schema's domain [0, 9]")
  missing = make_example("k", png, 3)
  del missing.features.feature["label"]
  assert data_check.schema_problem(missing, label) == "feature 'label' is missing"
  two = make_example("k", png, 3)
  two.features.feature["label"].int64_list.value.append(4)
  assert data_check.schema_problem(two, label) == "feature 'label' has 2 values, expected 1"
  text = make_example("k", png, 3)
  text.features.feature["label"].ClearField("int64_list")
  text.features.feature["label"].bytes_list.value.append(b"three")
  assert data_check.schema_problem(text, label) == (
      "feature 'label' holds bytes_list, expected int64_list")
  # Only the features ExampleValidator found anomalous are judged.
  assert data_check.schema_problem(make_example("k", png, 10), []) is None
