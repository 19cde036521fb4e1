"""Writes directories of TFRecord files like the ones users bring (train/, eval/, test/)."""
import functools
import io
import itertools
import os
import struct
import zlib
from types import MappingProxyType
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from PIL import Image

from components import image_sources
from components.splits import SPLITS


def png_of_shape(shape) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(np.full(shape, 128, np.uint8)).save(buffer, format="PNG")
  return buffer.getvalue()


@functools.lru_cache(maxsize=None)
def first_digit_records(split: str, limit: Optional[int]) -> tuple:
  """The split's first `limit` (None: all) digit records (key, png, label), made once per
  process: digits_records encodes each record it yields, so only these are encoded."""
  return tuple(itertools.islice(image_sources.digits_records(split, 0.15, 0.15), limit))


def write_digits_tfrecord_dir(
    path: str, per_split_limit: Optional[int] = None,
    corrupt: Mapping[int, Callable[[tf.train.Example], None]] = MappingProxyType({}),
    shift: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    without_classes: Sequence[int] = ()) -> str:
  """Digits as uncompressed TFRecords; corrupt[i] edits train example i in place, after giving
  it the key `bad-{i}`; shift maps every image (uint8 HxWx3) to the image written;
  without_classes are left out."""
  for split in SPLITS:
    os.makedirs(os.path.join(path, split), exist_ok=True)
    records = [record for record in first_digit_records(split, per_split_limit)
               if record[2] not in without_classes]
    with tf.io.TFRecordWriter(os.path.join(path, split, "digits.tfrecord")) as writer:
      for index, (key, png, label) in enumerate(records):
        if shift is not None:
          png = image_sources.encode_png(shift(image_sources.decode_png(png)))
        example = image_sources.make_example(key, png, label)
        if split == "train" and index in corrupt:
          example.features.feature["key"].bytes_list.value[:] = [f"bad-{index}".encode()]
          corrupt[index](example)
        writer.write(example.SerializeToString())
  return path


def png_bomb(width: int, height: int, rows_per_block: int = 100) -> bytes:
  """A valid 8-bit RGB PNG of width x height black pixels that is tiny on disk (a decompression
  bomb). One deflate block of rows_per_block rows, ended by a full flush, is repeated: each
  copy is self-contained, so building even a 20000x20000 image takes well under a second."""
  if height % rows_per_block:
    raise ValueError(f"height {height} must be a multiple of {rows_per_block}")

  def chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

  rows = b"\0" * ((1 + 3 * width) * rows_per_block)  # Each row: filter byte 0, then pixels.
  deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
  block = deflate.compress(rows) + deflate.flush(zlib.Z_FULL_FLUSH)
  checksum = 1
  for _ in range(height // rows_per_block):
    checksum = zlib.adler32(rows, checksum)
  stream = (b"\x78\xda" + block * (height // rows_per_block) + b"\x03\x00" +
            struct.pack(">I", checksum))
  header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
  return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", stream) +
          chunk(b"IEND", b""))
