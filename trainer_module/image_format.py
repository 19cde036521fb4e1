"""The one image format training and serving accept: an 8-bit RGB PNG of IMAGE_SHAPE, judged by
its header before any pixel is decoded.

A PNG's first 26 bytes are its signature, the IHDR chunk's length and type, then the declared
width, height (big-endian uint32), bit depth and colour type. Checking them first bounds
decoding: a 1 MB file declaring 20000x20000 pixels (a decompression bomb) is refused before
it can allocate 1.2 GB. Grayscale, palette, RGBA, 16-bit and JPEG images are refused on both
sides too, so that a model never serves inputs unlike those it was validated on.

`header_problem` is the check in Python (the data check, components/data_check.py);
`assert_png_headers` the same check as TensorFlow ops (both serving signatures), failing a
request with InvalidArgument.
"""
import struct
from typing import Optional

from trainer_module.features import IMAGE_SHAPE

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IHDR = b"\x00\x00\x00\x0dIHDR"  # Length 13, type IHDR: always the first chunk.
HEADER_LENGTH = 26
RGB_COLOR_TYPE = 2
BIT_DEPTH = 8
_COLOR_TYPES = {0: "grayscale", 2: "RGB", 3: "palette", 4: "grayscale+alpha", 6: "RGBA"}
_SHOWN = 10  # Bad positions named per message.
ACCEPTED = f"an 8-bit RGB PNG of {IMAGE_SHAPE[1]}x{IMAGE_SHAPE[0]} pixels"


def header_problem(image: bytes) -> Optional[str]:
  """Why the header does not declare ACCEPTED, or None; reads only the first 26 bytes."""
  header = image[:HEADER_LENGTH]
  if len(header) < HEADER_LENGTH or not header.startswith(PNG_SIGNATURE + _IHDR):
    return f"not a PNG image (expected {ACCEPTED})"
  width, height, depth, color_type = struct.unpack(">IIBB", header[16:26])
  if (height, width) != IMAGE_SHAPE[:2]:
    return f"declares {width}x{height} pixels (expected {ACCEPTED}); not decoded"
  if depth != BIT_DEPTH or color_type != RGB_COLOR_TYPE:
    kind = _COLOR_TYPES.get(color_type, f"colour type {color_type}")
    return f"is a {depth}-bit {kind} PNG (expected {ACCEPTED})"
  return None


def assert_png_headers(encoded):
  """An op that fails with InvalidArgument, naming the batch positions and what they declare,
  unless every element of the string tensor `encoded` ([batch]) declares ACCEPTED."""
  import tensorflow as tf
  padded = tf.strings.join([encoded, tf.constant(b"\0" * HEADER_LENGTH)])  # Short input too.
  is_png = tf.equal(tf.strings.substr(padded, 0, 16), PNG_SIGNATURE + _IHDR)
  fields = tf.reshape(tf.cast(tf.io.decode_raw(tf.strings.substr(padded, 16, 10), tf.uint8),
                             tf.int64), [-1, 10])  # [0, 10] for an empty batch too.
  big_endian = tf.constant([2**24, 2**16, 2**8, 1], tf.int64)
  width = tf.reduce_sum(fields[:, 0:4] * big_endian, axis=1)
  height = tf.reduce_sum(fields[:, 4:8] * big_endian, axis=1)
  depth, color_type = fields[:, 8], fields[:, 9]
  right_size = tf.logical_and(tf.equal(width, IMAGE_SHAPE[1]), tf.equal(height, IMAGE_SHAPE[0]))
  right_kind = tf.logical_and(tf.equal(depth, BIT_DEPTH), tf.equal(color_type, RGB_COLOR_TYPE))

  def positions(bad):
    return tf.reshape(tf.where(bad), [-1])

  not_png = tf.logical_not(is_png)
  wrong_size = tf.logical_and(is_png, tf.logical_not(right_size))
  wrong_kind = tf.logical_and(is_png, tf.logical_and(right_size, tf.logical_not(right_kind)))
  checks = [
      tf.debugging.Assert(tf.reduce_all(is_png), [
          f"Not a PNG image (expected {ACCEPTED}) at batch positions", positions(not_png)],
          summarize=_SHOWN),
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(wrong_size)), [
          f"Image declares another size (expected {ACCEPTED}; not decoded) at batch positions",
          positions(wrong_size), "declared widths", tf.boolean_mask(width, wrong_size),
          "declared heights", tf.boolean_mask(height, wrong_size)], summarize=_SHOWN),
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(wrong_kind)), [
          f"Image is not 8-bit RGB (expected {ACCEPTED}) at batch positions",
          positions(wrong_kind), "bit depths", tf.boolean_mask(depth, wrong_kind),
          "PNG colour types (0 grayscale, 3 palette, 4 grayscale+alpha, 6 RGBA)",
          tf.boolean_mask(color_type, wrong_kind)], summarize=_SHOWN),
  ]
  return tf.group(checks)
