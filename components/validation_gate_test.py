"""What the validation gate calls a bad image, and how it reports problems."""
import io

import numpy as np
from PIL import Image

from components.image_sources import encode_png, make_example
from components.validation_gate import example_key, format_problems, image_problem


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


def test_wrong_shapes_are_named_with_the_shape_found():
  assert "(28, 28, 3)" in image_problem(make_example("k", _png((28, 28, 3)), 1))
  assert "(32, 32)" in image_problem(make_example("k", _png((32, 32)), 1))


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
      [("eval", "bad-1", "data.gz", "'image' is not a PNG image")], num_bad_images=3)
  assert "feature 'label': Out-of-range values" in message
  assert "split 'eval', example key 'bad-1' (file data.gz): 'image' is not a PNG image" in message
  assert "2 more bad images" in message
