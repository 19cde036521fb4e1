"""Where images come from: the embedded digits and tensorflow-datasets (the split by key is
components/splits.py).

Every source yields `(key, png_bytes, label)` with a stable, unique key, so the split of an
example, and everything derived from its key later, is the same on every run and machine.
"""
from __future__ import annotations

import io
import os
from typing import Iterator, Optional, Tuple

import numpy as np
from PIL import Image

from components.splits import split_for_key
from trainer_module.features import EXAMPLE_KEY, IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY

DIGITS_NUM_CLASSES = 10

Record = Tuple[str, bytes, int]


def encode_png(image: np.ndarray) -> bytes:
  if image.dtype != np.uint8 or image.shape != IMAGE_SHAPE:
    raise ValueError(f"Expected a uint8 image of shape {IMAGE_SHAPE}, got {image.dtype} "
                     f"{image.shape}.")
  buffer = io.BytesIO()
  Image.fromarray(image, mode="RGB").save(buffer, format="PNG")
  return buffer.getvalue()


def decode_png(png: bytes) -> np.ndarray:
  with Image.open(io.BytesIO(png)) as image:
    if image.format != "PNG":
      raise ValueError(f"not a PNG image (format {image.format})")
    return np.asarray(image)


def make_example(key: str, png: bytes, label: int):
  import tensorflow as tf  # Deferred: keeps the pure-Python helpers importable without TF.
  feature = {
      IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
      LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
      EXAMPLE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[key.encode("utf-8")])),
  }
  return tf.train.Example(features=tf.train.Features(feature=feature))


def digits_to_images(digits: np.ndarray) -> np.ndarray:
  """8x8 grey levels in [0, 16] -> 32x32x3 uint8 (bilinear upscale, grey replicated to RGB)."""
  images = []
  for digit in digits:
    grey = Image.fromarray(np.round(digit * (255.0 / 16.0)).astype(np.uint8), mode="L")
    grey = np.asarray(grey.resize(IMAGE_SHAPE[:2], Image.BILINEAR))
    images.append(np.repeat(grey[:, :, None], IMAGE_SHAPE[2], axis=2))
  return np.stack(images)


def digits_records(split: str, eval_fraction: float, test_fraction: float) -> Iterator[Record]:
  """The 1,797 real handwritten digits bundled with scikit-learn, for one split."""
  from sklearn.datasets import load_digits
  digits = load_digits()
  images = digits_to_images(digits.images)
  for index, (image, label) in enumerate(zip(images, digits.target)):
    key = f"digits-{index:04d}"
    if split_for_key(key, eval_fraction, test_fraction) == split:
      yield key, encode_png(image), int(label)


class TfdsUnavailable(ValueError):
  """A tensorflow-datasets dataset is not prepared, and downloading it failed."""


def prepare_tfds(name: str, data_dir: Optional[str] = None) -> None:
  """Downloads and prepares a tensorflow-datasets dataset (e.g. "cifar10" or
  "cifar10_corrupted/frost_1") unless it is prepared already: once, in the step's own process,
  so that its Beam workers only read it and a failure names the dataset, not a worker's
  traceback. A failed attempt removes the directories it made (the dataset's and the
  download's), so the next one starts clean."""
  import shutil
  import tensorflow_datasets as tfds
  builder = tfds.builder(name, data_dir=data_dir)
  if builder.is_prepared():
    return
  root, data_path = os.fspath(builder.data_dir_root), os.fspath(builder.data_path)
  downloads = os.path.join(root, "downloads")
  made = [data_path, os.path.join(downloads, builder.name), os.path.join(downloads, "extracted"),
          downloads]
  parent = os.path.dirname(data_path)
  while parent.startswith(root):
    made.append(parent)
    parent = os.path.dirname(parent)
  # Deepest first; on object storage tfds' own temporary names are left to it.
  made = [path for path in made if "://" not in root and not os.path.exists(path)]
  try:
    builder.download_and_prepare()
  except Exception as error:
    for path in made:
      shutil.rmtree(path, ignore_errors=True)
    cause = (str(error).strip().splitlines() or [""])[0].rstrip(".")
    cause = cause if len(cause) <= 200 else cause[:200] + "..."
    advice = (f" Prepare it where there is network access (tfds build {name} --data_dir=DIR) and "
              "pass --tfds_data_dir=DIR." if _is_network_error(error) else "")
    raise TfdsUnavailable(
        f"tensorflow-datasets could not {'download' if advice else 'prepare'} {name} into "
        f"{root}: {type(error).__name__}: {cause}."
        f"{advice}") from error


def _is_network_error(error: BaseException) -> bool:
  """Whether a failed download_and_prepare failed to reach the dataset's source."""
  import urllib.error
  import requests
  return isinstance(error, (requests.exceptions.RequestException, urllib.error.URLError,
                            ConnectionError, TimeoutError))


def tfds_records(name: str, split: str, eval_fraction: float,
                 data_dir: Optional[str] = None) -> Iterator[Record]:
  """A tensorflow-datasets image dataset (e.g. cifar10), for one split. The step prepares it
  first (prepare_tfds), so a worker on its machine only reads it; one elsewhere (Dataflow)
  downloads it itself unless the data dir is shared.

  The dataset's own test split is our test split; its train split is divided into train and
  eval by key, so model selection never sees test images.
  """
  import tensorflow_datasets as tfds
  source_split = "test" if split == "test" else "train"
  dataset = tfds.load(name, split=source_split, data_dir=data_dir, shuffle_files=False)
  for record in tfds.as_numpy(dataset):
    key = f"{name}-{record['id'].decode('utf-8')}"
    if split == "test" or split_for_key(key, eval_fraction, 0.0) == split:
      yield key, encode_png(record["image"]), int(record["label"])
