"""The image formats of the pipeline, and the one conversion of any image to the model's input,
shared by serving and the image_dir ingest so a photo and its ingested PNG are the same input.
Headers are judged before any pixel is decoded, so a decompression bomb costs nothing.
"""
import struct
from typing import Optional

from trainer_module.features import IMAGE_SHAPE

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IHDR = b"\x00\x00\x00\x0dIHDR"  # Length 13, type IHDR: always the first chunk.
# Length 0, type IEND, its CRC: the last chunk. A decoder stops there; bytes some tools leave
# after it are ignored, as the image_dir ingest ignores them.
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"
JPEG_SIGNATURE = b"\xff\xd8\xff"  # Start of image, then the first marker.
# A JPEG's start of scan and end of image markers. Inside a scan's data a 0xff byte is followed
# by 0x00 or a restart marker, so the end of image after the last scan is the image's (an EXIF
# thumbnail's own markers come before the image's first scan).
JPEG_SCAN, JPEG_END = b"\xff\xda", b"\xff\xd9"
# A PNG's first 26 bytes: signature, IHDR length and type, width and height (big-endian uint32),
# bit depth, colour type. A JPEG's size is in its SOF marker (tf.image.extract_jpeg_shape reads it
# without decoding). A truncated PNG or JPEG (a cut upload or copy) is refused by its missing end
# chunk or marker, naming its batch position, rather than by the decoder's "Invalid PNG data" or
# "Invalid JPEG data" that names none.
HEADER_LENGTH = 26
RGB_COLOR_TYPE = 2
BIT_DEPTH = 8
_COLOR_TYPES = {0: "grayscale", 2: "RGB", 3: "palette", 4: "grayscale+alpha", 6: "RGBA"}
_SHOWN = 10  # Bad positions named per message.
ACCEPTED = f"an 8-bit RGB PNG of {IMAGE_SHAPE[1]}x{IMAGE_SHAPE[0]} pixels"
# The largest image decoded, by declared width x height (a 40-megapixel camera's photo; 120 MB
# of RGB pixels): larger ones are refused, served or ingested, without decoding.
MAX_DECLARED_PIXELS = 40_000_000
SERVED = f"a JPEG or PNG image of at most {MAX_DECLARED_PIXELS:,} pixels"


def header_problem(image: bytes) -> Optional[str]:
  """Why a stored example's header does not declare ACCEPTED or the file has no end, or None;
  decodes nothing."""
  header = image[:HEADER_LENGTH]
  if len(header) < HEADER_LENGTH or not header.startswith(PNG_SIGNATURE + _IHDR):
    return f"not a PNG image (expected {ACCEPTED})"
  width, height, depth, color_type = struct.unpack(">IIBB", header[16:26])
  if (height, width) != IMAGE_SHAPE[:2]:
    return f"declares {width}x{height} pixels (expected {ACCEPTED}); not decoded"
  if depth != BIT_DEPTH or color_type != RGB_COLOR_TYPE:
    kind = _COLOR_TYPES.get(color_type, f"colour type {color_type}")
    return f"is a {depth}-bit {kind} PNG (expected {ACCEPTED})"
  if PNG_END not in image[HEADER_LENGTH:]:
    return "is truncated: it has no IEND chunk"
  return None


def resize_to_model_input(image):
  """uint8 [height, width, 3] -> uint8 IMAGE_SHAPE: squashed (aspect ratio not kept, as
  Keras' image_dataset_from_directory does by default) with antialiased bilinear filtering,
  rounded; an image of IMAGE_SHAPE already is returned unchanged."""
  import tensorflow as tf
  size = IMAGE_SHAPE[:2]

  def resized():
    scaled = tf.image.resize(image, size, method="bilinear", antialias=True)
    return tf.cast(tf.clip_by_value(tf.round(scaled), 0.0, 255.0), tf.uint8)

  same_size = tf.reduce_all(tf.equal(tf.shape(image)[:2], size))
  return tf.ensure_shape(tf.cond(same_size, lambda: image, resized), IMAGE_SHAPE)


def decode_to_model_input(encoded):
  """One JPEG or PNG image's bytes (any size, bit depth or colour mode: grayscale, palette and
  CMYK are converted to RGB, alpha dropped) -> uint8 IMAGE_SHAPE. TensorFlow also decodes GIF
  and BMP here, but ignores a BMP's palette: ingest converts those two with PIL."""
  import tensorflow as tf
  image = tf.io.decode_image(encoded, channels=IMAGE_SHAPE[-1], dtype=tf.uint8,
                             expand_animations=False)
  return resize_to_model_input(image)


def _split(encoded, marker: bytes):
  """([batch] the number of parts each string has between occurrences of `marker`, [batch]
  each string's last part). The sparse split op: the ragged one counts its rows with a bincount,
  an op the serving graph is checked not to hold (only AugMix needs it)."""
  import tensorflow as tf
  indices, parts, _ = tf.raw_ops.StringSplitV2(input=encoded, sep=marker)
  counts = tf.math.unsorted_segment_sum(tf.ones_like(indices[:, 0]), indices[:, 0],
                                        tf.size(encoded, out_type=tf.int64))
  return counts, tf.gather(parts, tf.cumsum(counts) - 1)  # Every string has a part.


def _contains(encoded, marker: bytes):
  """[batch] bool: whether each string holds `marker`."""
  return _split(encoded, marker)[0] > 1


def _jpeg_sizes(encoded, is_jpeg):
  """([batch, 2] int64 declared [width, height], [batch] bool readable) of the JPEGs among
  `encoded`, read from their headers by libjpeg (tf.image.extract_jpeg_shape) without
  decoding. A header libjpeg refuses (cut short, corrupted, declaring no pixels) is not an
  error here but unreadable, so that the request's error can name its position."""
  import tensorflow as tf
  positions = tf.reshape(tf.where(is_jpeg), [-1])
  shapes = (tf.data.Dataset.from_tensor_slices((positions, tf.gather(encoded, positions)))
            .map(lambda position, image: (position, tf.image.extract_jpeg_shape(image,
                                                                                tf.int64)))
            .ignore_errors()
            .batch(tf.maximum(tf.size(positions, tf.int64), 1))
            .reduce((tf.zeros([0], tf.int64), tf.zeros([0, 3], tf.int64)),
                    lambda found, batch: (tf.concat([found[0], batch[0]], 0),
                                          tf.concat([found[1], batch[1]], 0))))
  batch = tf.shape(encoded, out_type=tf.int64)[:1]
  read = shapes[0][:, tf.newaxis]
  sizes = tf.scatter_nd(read, tf.reverse(shapes[1][:, :2], [1]), tf.concat([batch, [2]], 0))
  readable = tf.scatter_nd(read, tf.ones_like(shapes[0], tf.bool), batch)
  return sizes, readable


def assert_served_headers(encoded):
  """An op that fails with InvalidArgument, naming the batch positions and what they declare,
  unless every element of the string tensor `encoded` ([batch]) is SERVED by its header."""
  import tensorflow as tf
  padded = tf.strings.join([encoded, tf.constant(b"\0" * HEADER_LENGTH)])  # Short input too.
  is_png = tf.equal(tf.strings.substr(padded, 0, 16), PNG_SIGNATURE + _IHDR)
  is_jpeg = tf.equal(tf.strings.substr(padded, 0, len(JPEG_SIGNATURE)), JPEG_SIGNATURE)
  fields = tf.reshape(tf.cast(tf.io.decode_raw(tf.strings.substr(padded, 16, 8), tf.uint8),
                              tf.int64), [-1, 8])  # [0, 8] for an empty batch too.
  big_endian = tf.constant([2**24, 2**16, 2**8, 1], tf.int64)
  png_size = tf.stack([tf.reduce_sum(fields[:, 0:4] * big_endian, axis=1),
                       tf.reduce_sum(fields[:, 4:8] * big_endian, axis=1)], axis=1)
  jpeg_size, jpeg_readable = _jpeg_sizes(encoded, is_jpeg)
  size = tf.where(is_jpeg[:, tf.newaxis], jpeg_size, png_size)
  known = tf.logical_or(is_png, is_jpeg)
  unreadable = tf.logical_and(is_jpeg, tf.logical_not(jpeg_readable))
  empty = tf.logical_and(is_png, size[:, 0] * size[:, 1] == 0)
  too_large = tf.logical_and(known, size[:, 0] * size[:, 1] > MAX_DECLARED_PIXELS)
  png_cut = tf.logical_and(tf.logical_and(is_png, tf.logical_not(too_large)),
                           tf.logical_not(_contains(encoded, PNG_END)))
  scans, after_last_scan = _split(encoded, JPEG_SCAN)
  jpeg_cut = tf.logical_and(jpeg_readable, tf.logical_not(tf.logical_and(
      scans > 1, _contains(after_last_scan, JPEG_END))))

  def positions(bad):
    return tf.reshape(tf.where(bad), [-1])

  return tf.group([
      tf.debugging.Assert(tf.reduce_all(known), [
          f"Not a JPEG or PNG image (expected {SERVED}) at batch positions",
          positions(tf.logical_not(known))], summarize=_SHOWN),
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(unreadable)), [
          "JPEG image unreadable before its pixels (its header is cut short, corrupted or "
          "declares no pixels; not decoded) at batch positions", positions(unreadable)],
                          summarize=_SHOWN),
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(empty)), [
          "Image declares no pixels (a width or height of 0) at batch positions",
          positions(empty)], summarize=_SHOWN),
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(too_large)), [
          f"Image declares too many pixels (expected {SERVED}; not decoded) at batch "
          "positions", positions(too_large), "declared widths",
          tf.boolean_mask(size[:, 0], too_large), "declared heights",
          tf.boolean_mask(size[:, 1], too_large)], summarize=_SHOWN),
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(png_cut)), [
          "PNG image truncated (it has no IEND chunk) at batch positions", positions(png_cut)],
                          summarize=_SHOWN),
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(jpeg_cut)), [
          "JPEG image truncated (no end of image marker after its last scan) at batch "
          "positions", positions(jpeg_cut)], summarize=_SHOWN),
  ])
