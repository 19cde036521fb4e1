"""Ingestion: stable keys, the digits split as components/splits.py assigns it, lossless PNGs,
and the tfds path."""
import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components import image_sources
from components.example_gen import records_for_query, source_query
from components.splits import SPLITS
from trainer_module.features import IMAGE_SHAPE


EVAL_FRACTION, TEST_FRACTION = 0.1, 0.3  # Unequal, so that swapping the two shows.


def _digits(split):
  return list(image_sources.digits_records(split, EVAL_FRACTION, TEST_FRACTION))


def test_digits_splits_partition_all_1797_examples_with_unique_stable_keys():
  splits = {split: _digits(split) for split in SPLITS}
  keys = [key for records in splits.values() for key, _, _ in records]
  assert len(keys) == len(set(keys)) == 1797
  assert 1797 * 0.55 < len(splits["train"]) < 1797 * 0.65  # 60% of 1797 is 1078.
  assert 1797 * 0.07 < len(splits["eval"]) < 1797 * 0.13  # 10%: 180.
  assert 1797 * 0.26 < len(splits["test"]) < 1797 * 0.34  # 30%: 539.
  again = _digits("test")
  assert [(k, png, label) for k, png, label in again] == splits["test"]  # Bytes too.
  assert {label for records in splits.values() for _, _, label in records} == set(range(10))


def test_digits_images_are_upscaled_grey_replicated_to_rgb():
  from sklearn.datasets import load_digits
  images = image_sources.digits_to_images(load_digits().images[:5])
  assert images.shape == (5,) + IMAGE_SHAPE and images.dtype == np.uint8
  assert np.array_equal(images[..., 0], images[..., 1])
  assert np.array_equal(images[..., 0], images[..., 2])
  assert images.max() > 200 and images.min() == 0


def test_png_round_trip_is_lossless_for_pil_and_tensorflow():
  image = np.random.default_rng(0).integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)
  png = image_sources.encode_png(image)
  assert np.array_equal(image_sources.decode_png(png), image)
  assert np.array_equal(tf.io.decode_png(png, channels=3).numpy(), image)


def test_encode_png_rejects_wrong_shape_or_dtype():
  with pytest.raises(ValueError, match="shape"):
    image_sources.encode_png(np.zeros((28, 28, 3), np.uint8))
  with pytest.raises(ValueError, match="uint8"):
    image_sources.encode_png(np.zeros(IMAGE_SHAPE, np.float32))


def test_decode_png_rejects_other_formats():
  buffer = io.BytesIO()
  Image.fromarray(np.zeros(IMAGE_SHAPE, np.uint8)).save(buffer, format="JPEG")
  with pytest.raises(ValueError, match="not a PNG"):
    image_sources.decode_png(buffer.getvalue())


def test_make_example_carries_image_label_and_key():
  example = image_sources.make_example("digits-0001", b"png", 7)
  features = example.features.feature
  assert features["image"].bytes_list.value == [b"png"]
  assert features["label"].int64_list.value == [7]
  assert features["key"].bytes_list.value == [b"digits-0001"]


def test_example_gen_query_reads_the_split_it_names():
  query = source_query("digits", "eval", EVAL_FRACTION, TEST_FRACTION, None)
  assert list(records_for_query(query)) == _digits("eval")


def test_cifar10_through_tfds_splits_train_into_train_and_eval_and_keeps_test():
  import tensorflow_datasets as tfds
  with tfds.testing.mock_data(num_examples=40):
    splits = {split: list(image_sources.tfds_records("cifar10", split, eval_fraction=0.25))
              for split in SPLITS}
  train_keys = {key for key, _, _ in splits["train"]}
  eval_keys = {key for key, _, _ in splits["eval"]}
  assert len(train_keys) + len(eval_keys) == 40 and not train_keys & eval_keys
  assert eval_keys, "the eval split is carved out of tfds' train split"
  assert len(splits["test"]) == 40
  for key, png, label in splits["train"] + splits["test"]:
    assert key.startswith("cifar10-")
    assert image_sources.decode_png(png).shape == IMAGE_SHAPE
    assert 0 <= label < 10


def _refused_port() -> int:
  """A port on 127.0.0.1 that nothing listens on."""
  import socket
  with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    return probe.getsockname()[1]


@pytest.fixture
def no_network(monkeypatch):
  """tfds' real downloader, sent to a refused local proxy and retrying nothing: a download
  fails at once, as it does (after minutes of retries) on a host without network."""
  from tensorflow_datasets.core.download import downloader
  proxy = f"http://127.0.0.1:{_refused_port()}"
  for variable in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
    monkeypatch.setenv(variable, proxy)
  monkeypatch.delenv("NO_PROXY", raising=False)
  monkeypatch.delenv("no_proxy", raising=False)
  monkeypatch.setattr(downloader, "MAX_RETRIES", 0)


def test_a_dataset_that_cannot_be_downloaded_is_named_and_leaves_no_directories(tmp_path,
                                                                                 no_network):
  fresh = tmp_path / "fresh"
  with pytest.raises(image_sources.TfdsUnavailable,
                     match=rf"cifar10 into {fresh}: .*Error.*--tfds_data_dir=DIR"):
    image_sources.prepare_tfds("cifar10", str(fresh))
  assert not fresh.exists(), "the data dir the attempt made is gone"
  used = tmp_path / "used"
  (used / "mnist").mkdir(parents=True)
  (used / "mnist" / "keep.txt").write_text("another dataset's")
  with pytest.raises(image_sources.TfdsUnavailable, match="could not download "
                     rf"cifar10_corrupted/frost_1 into {used}: .*--tfds_data_dir=DIR"):
    image_sources.prepare_tfds("cifar10_corrupted/frost_1", str(used))
  assert sorted(p.name for p in used.rglob("*")) == ["keep.txt", "mnist"]


def test_a_prepared_dataset_is_not_downloaded_again(tmp_path, monkeypatch):
  import tensorflow_datasets as tfds

  def download(self, *args, **kwargs):
    raise OSError(f"No space left on device while preparing {self.name}")

  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", download)
  monkeypatch.setattr(tfds.core.DatasetBuilder, "is_prepared", lambda self: True)
  image_sources.prepare_tfds("cifar10", str(tmp_path))
  monkeypatch.setattr(tfds.core.DatasetBuilder, "is_prepared", lambda self: False)
  with pytest.raises(image_sources.TfdsUnavailable) as raised:
    image_sources.prepare_tfds("cifar10", str(tmp_path))
  assert str(raised.value) == (  # Not a download problem: no advice about the network.
      f"tensorflow-datasets could not prepare cifar10 into {tmp_path}: OSError: No space left on "
      "device while preparing cifar10.")
