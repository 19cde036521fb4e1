"""What the data check calls a bad image, and how it reports problems."""
import io
import os
import re

import numpy as np
from PIL import Image, ImageFile
from tfx.utils import io_utils

from components import data_check, image_sources, tfrecord_check
from components.image_sources import encode_png, make_example
from components.tfrecord_check import example_id
from components.data_check import format_problems, image_problem, key_problem
from test_support.tfrecord_inputs import png_bomb
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


def test_what_the_gate_accepts_serving_decodes_unchanged_and_serving_converts_more():
  """Stored examples are the model's input as it is; a served request may be any JPEG or PNG,
  converted. So serving takes every image the gate accepts and decodes it to the same pixels,
  takes the off-shape PNGs the gate refuses and converts them, and both refuse what is not a
  whole image."""
  import tensorflow as tf

  def serving_accepts(image):
    try:
      image_format.assert_served_headers(tf.constant([image]))
    except tf.errors.InvalidArgumentError:
      return False
    return True

  pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), np.uint8)
  stored = encode_png(pixels)
  assert image_problem(make_example("k", stored, 1)) is None and serving_accepts(stored)
  np.testing.assert_array_equal(image_format.decode_to_model_input(tf.constant(stored)), pixels)
  for image in (_png((28, 28, 3)), _png((32, 32)), _png((32, 32, 4))):
    assert image_problem(make_example("k", image, 1)) is not None and serving_accepts(image)
    assert image_format.decode_to_model_input(tf.constant(image)).shape == (32, 32, 3)
  for image in (stored[:-20], b"\x00garbage", b""):
    assert image_problem(make_example("k", image, 1)) is not None
    assert not serving_accepts(image)


def test_a_decompression_bomb_is_refused_by_its_header_without_decoding(monkeypatch):
  """Every way the gate decodes (our decode_png, PIL's pixel loading) records its call: the
  bomb reaches none, a good image does."""
  decoded = []

  def recording(name, decode):
    def record(*args, **kwargs):
      decoded.append(name)
      return decode(*args, **kwargs)
    return record

  monkeypatch.setattr(image_sources, "decode_png",
                      recording("decode_png", image_sources.decode_png))
  monkeypatch.setattr(ImageFile.ImageFile, "load", recording("PIL load", ImageFile.ImageFile.load))
  bomb = png_bomb(12000, 12000)  # 420 KB declaring 432 MB of pixels.
  problem = image_problem(make_example("k", bomb, 1))
  assert "declares 12000x12000 pixels" in problem and "not decoded" in problem
  assert decoded == []
  assert image_problem(make_example("k", encode_png(np.zeros((32, 32, 3), np.uint8)), 1)) is None
  assert decoded[0] == "decode_png" and "PIL load" in decoded  # What a decode looks like.


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


def test_an_example_without_a_bytes_key_is_told_apart_by_its_image_and_found_in_its_file(
    tmp_path):
  import tensorflow as tf
  example = make_example("digits-0042", b"png-bytes", 1)
  assert example_id(example) == "digits-0042"
  del example.features.feature["key"]
  assert re.fullmatch(r"<no key; image sha256 [0-9a-f]{16}>", example_id(example))
  int_key = make_example("k", b"png-bytes", 1)
  int_key.features.feature["key"].int64_list.value[:] = [7]
  assert re.fullmatch(r"<key holds int64_list \[7\]; image sha256 [0-9a-f]{16}>",
                      example_id(int_key))
  other = make_example("k", b"other-png-bytes", 1)
  del other.features.feature["key"]
  assert example_id(other) != example_id(example)
  os.makedirs(tmp_path / "train")
  path = str(tmp_path / "train" / "mine.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for written in (make_example("a", b"x", 1), example, int_key):
      writer.write(written.SerializeToString())
  wanted = [example_id(example), example_id(int_key)]
  assert tfrecord_check.files_holding(str(tmp_path), wanted) == {key: [path] for key in wanted}


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


def _run_gate(tmp_path, split_sizes, **parameters):
  """The gate's executor over tiny valid splits of the given sizes (no anomalies)."""
  import tensorflow as tf
  from tensorflow_metadata.proto.v0 import anomalies_pb2
  from tfx.dsl.components.base import base_beam_executor
  from tfx.types import artifact_utils, standard_artifacts
  from tfx.types.experimental import simple_artifacts

  def artifact(kind, name):
    made = kind()
    made.uri = str(tmp_path / name)
    os.makedirs(made.uri)
    return made
  examples = artifact(standard_artifacts.Examples, "examples")
  examples.split_names = artifact_utils.encode_split_names(list(split_sizes))
  anomalies = artifact(standard_artifacts.ExampleAnomalies, "anomalies")
  png = encode_png(np.zeros((32, 32, 3), np.uint8))
  for split, size in split_sizes.items():
    os.makedirs(os.path.join(examples.uri, f"Split-{split}"))
    with tf.io.TFRecordWriter(os.path.join(examples.uri, f"Split-{split}", "data")) as writer:
      for index in range(size):
        writer.write(make_example(f"{split}-{index}", png, index % 10).SerializeToString())
    os.makedirs(os.path.join(anomalies.uri, f"Split-{split}"))
    with open(os.path.join(anomalies.uri, f"Split-{split}", "SchemaDiff.pb"), "wb") as f:
      f.write(anomalies_pb2.Anomalies().SerializeToString())
  schema = artifact(standard_artifacts.Schema, "schema")
  with open(os.path.join(os.path.dirname(data_check.__file__), "schema.pbtxt")) as f:
    io_utils.write_string_file(os.path.join(schema.uri, "schema.pbtxt"), f.read())
  report = artifact(simple_artifacts.Metrics, "report")
  from pipeline.config import PipelineConfig
  # A small step's arguments as the local pipeline makes them: the requirements file stops TFX
  # from building an sdist of itself for the executor (tfx/utils/dependency_utils.py).
  context = base_beam_executor.BaseBeamExecutor.Context(
      beam_pipeline_args=PipelineConfig().beam_pipeline_args(examples=1),
      tmp_dir=str(tmp_path / "tmp"))
  data_check.DataCheck.EXECUTOR_SPEC.executor_class(context).Do(
      {"examples": [examples], "anomalies": [anomalies], "schema": [schema]},
      {"report": [report]}, {"input_base": "", **parameters})


def test_splits_too_small_to_train_or_to_judge_on_stop_the_run_before_transform(tmp_path):
  import pytest
  with pytest.raises(data_check.DataValidationError) as error:
    _run_gate(tmp_path, {"train": 6, "eval": 1}, min_train_examples=8, min_eval_examples=5)
  assert ("split 'train' has 6 examples, fewer than 8 (per_core_batch_size: the Trainer drops "
          "an incomplete batch, so it would take no step)") in str(error.value)
  assert ("split 'eval' has 1 examples, fewer than 5 (min_eval_examples: the gate does not "
          "judge a model on fewer)") in str(error.value)
  _run_gate(tmp_path / "enough", {"train": 8, "eval": 5}, min_train_examples=8,
            min_eval_examples=5)


def test_a_stored_png_cut_short_is_named_and_one_with_bytes_after_its_end_is_fine():
  """As serving judges them: a PNG ends at its IEND chunk, and bytes after it are ignored."""
  png = encode_png(np.zeros((32, 32, 3), np.uint8))
  assert image_problem(make_example("k", png[:-20], 1)) == (
      "'image' is truncated: it has no IEND chunk")
  assert image_problem(make_example("k", png + b"\x00\x00", 1)) is None
