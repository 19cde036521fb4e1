"""Writes directories of TFRecord files like the ones users bring (train/, eval/, test/)."""
import io
import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
from PIL import Image

from components import image_sources


def png_of_shape(shape) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(np.full(shape, 128, np.uint8)).save(buffer, format="PNG")
  return buffer.getvalue()


def write_digits_tfrecord_dir(path: str, per_split_limit: Optional[int] = None,
                              corrupt: Optional[Callable[[tf.train.Example], None]] = None) -> str:
  """Digits as uncompressed TFRecords; `corrupt` edits one train example in place."""
  for split in image_sources.SPLITS:
    os.makedirs(os.path.join(path, split), exist_ok=True)
    records = list(image_sources.digits_records(split, 0.15, 0.15))[:per_split_limit]
    with tf.io.TFRecordWriter(os.path.join(path, split, "digits.tfrecord")) as writer:
      for index, (key, png, label) in enumerate(records):
        example = image_sources.make_example(key, png, label)
        if corrupt is not None and split == "train" and index == 7:
          example.features.feature["key"].bytes_list.value[:] = [b"bad-example"]
          corrupt(example)
        writer.write(example.SerializeToString())
  return path
