"""Folders of labelled images for tests: classes a small network tells apart (each its own
colour), in every format and colour mode the image_dir ingest takes, at assorted sizes; and the
bad files it must name."""
import io
import os
import zlib
from typing import Dict, Sequence, Tuple

import numpy as np
from PIL import Image

CLASS_COLOURS = {"blue sky": (40, 70, 220), "grass": (40, 200, 60), "red_car": (220, 40, 40)}
# (PIL format, mode, file extension): what a camera, a scanner or a web page hands a user.
KINDS = (("JPEG", "RGB", "jpg"), ("PNG", "RGBA", "png"), ("PNG", "P", "png"),
         ("JPEG", "CMYK", "jpeg"), ("GIF", "P", "gif"), ("BMP", "RGB", "bmp"),
         ("PNG", "RGB", "PNG"), ("JPEG", "L", "jpg"))


def photo(colour: Tuple[int, int, int], size: Tuple[int, int], seed: int) -> Image.Image:
  """A width x height RGB image of `colour` with noise and a darker random rectangle."""
  rng = np.random.default_rng(seed)
  width, height = size
  pixels = np.clip(np.array(colour, np.float32) + rng.normal(0, 25, (height, width, 3)), 0, 255)
  x, y = rng.integers(0, width // 2), rng.integers(0, height // 2)
  pixels[y:y + height // 3, x:x + width // 3] *= 0.6
  return Image.fromarray(pixels.astype(np.uint8), "RGB")


def encode(image: Image.Image, image_format: str, mode: str) -> bytes:
  buffer = io.BytesIO()
  image.convert(mode).save(buffer, format=image_format)
  return buffer.getvalue()


def write_image_folder(root: str, per_class: int, splits: Sequence[str] = (),
                       classes: Dict[str, Tuple[int, int, int]] = CLASS_COLOURS) -> Dict[str, str]:
  """root/<class>/ (or root/<split>/<class>/ for each of `splits`) with per_class images of
  each class, cycling through KINDS and sizes from 12 to 160 pixels a side; some in a
  subfolder. Returns {relative path: class}."""
  written = {}
  for split in splits or ("",):
    for c, (name, colour) in enumerate(sorted(classes.items())):
      for i in range(per_class):
        image_format, mode, extension = KINDS[i % len(KINDS)]
        seed = zlib.crc32(f"{split}/{c}/{i}".encode())
        size = (12 + (seed % 149), 12 + ((seed // 149) % 149))
        sub = "more" if i % 10 == 9 else ""
        relative = os.path.join(*[p for p in (split, name, sub, f"{i:04d}.{extension}") if p])
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
          f.write(encode(photo(colour, size, seed), image_format, mode))
        written[relative] = name
  return written


def png_declaring(width: int, height: int) -> bytes:
  """A small PNG whose header declares width x height pixels (a decompression bomb)."""
  data = bytearray(encode(photo((0, 0, 0), (8, 8), 0), "PNG", "RGB"))
  data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
  data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")  # IHDR's CRC: a valid header.
  return bytes(data)


def jpeg(size=(480, 360), colour=(220, 40, 40), seed=0) -> bytes:
  return encode(photo(colour, size, seed), "JPEG", "RGB")
