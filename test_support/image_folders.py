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
                       classes: Dict[str, Tuple[int, int, int]] = CLASS_COLOURS,
                       salt: str = "") -> Dict[str, str]:
  """root/<class>/ (or root/<split>/<class>/ for each of `splits`) with per_class images of
  each class, cycling through KINDS and sizes from 12 to 160 pixels a side; some in a
  subfolder; `salt` draws other images. Returns {relative path: class}."""
  written = {}
  for split in splits or ("",):
    for c, (name, colour) in enumerate(sorted(classes.items())):
      for i in range(per_class):
        image_format, mode, extension = KINDS[i % len(KINDS)]
        seed = zlib.crc32(f"{salt}{split}/{c}/{i}".encode())
        size = (12 + (seed % 149), 12 + ((seed // 149) % 149))
        sub = "more" if i % 10 == 9 else ""
        relative = os.path.join(*[p for p in (split, name, sub, f"{i:04d}.{extension}") if p])
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
          f.write(encode(photo(colour, size, seed), image_format, mode))
        written[relative] = name
  return written


DATES = ("2026-11-29", "2026-11-30", "2026-12-01", "2026-12-02")
DATE_PATTERN = "{YYYY}-{MM}-{DD}"


def write_dated_spans(root: str, per_class: int, dates: Sequence[str] = DATES
                      ) -> Dict[str, Dict[str, str]]:
  """root/<date>/<class>/ for each date (a day's new images: other images each day), as
  --image_dir=root/{YYYY}-{MM}-{DD} reads them. Returns {date: {relative path: class}}."""
  return {date: write_image_folder(os.path.join(root, date), per_class, salt=date)
          for date in dates}


def digit_images(count: int):
  """(32x32x3 uint8 images, labels) of the first `count` digits bundled with scikit-learn, as
  the digits dataset encodes them."""
  from sklearn.datasets import load_digits
  from components import image_sources
  loaded = load_digits()
  return image_sources.digits_to_images(loaded.images[:count]), loaded.target[:count]


def write_digit_spans(root: str, dates: Sequence[str], per_span: int = 1797
                      ) -> Dict[str, Dict[str, str]]:
  """The digits bundled with scikit-learn as dated spans of an image folder,
  root/<date>/<digit>/digits-NNNN.png (32x32 RGB PNGs, as the digits dataset encodes them), the
  first `per_span` digits in every span: each span splits them by its own keys. Returns
  {date: {relative path: class}}."""
  from components import image_sources
  images, labels = digit_images(per_span)
  written = {}
  for date in dates:
    written[date] = {}
    for index, (image, label) in enumerate(zip(images, labels)):
      relative = os.path.join(str(label), f"digits-{index:04d}.png")
      path = os.path.join(root, date, relative)
      os.makedirs(os.path.dirname(path), exist_ok=True)
      with open(path, "wb") as f:
        f.write(image_sources.encode_png(image))
      written[date][relative] = str(label)
  return written


def png_declaring(width: int, height: int) -> bytes:
  """A small PNG whose header declares width x height pixels (a decompression bomb)."""
  data = bytearray(encode(photo((0, 0, 0), (8, 8), 0), "PNG", "RGB"))
  data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
  data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")  # IHDR's CRC: a valid header.
  return bytes(data)


def jpeg(size=(480, 360), colour=(220, 40, 40), seed=0) -> bytes:
  return encode(photo(colour, size, seed), "JPEG", "RGB")


def add_names_not_utf8(root: str) -> Dict[str, str]:
  """A photo and a class folder whose names are Latin-1, not UTF-8, in a folder of
  CLASS_COLOURS' classes. Returns {path as the ingest names it: its reason's start}."""
  base = os.fsencode(root)
  with open(base + b"/grass/caf\xe9.jpg", "wb") as f:
    f.write(jpeg())
  os.makedirs(base + b"/chien\xe9")
  with open(base + b"/chien\xe9/0000.jpg", "wb") as f:
    f.write(jpeg())
  return {f"{root}/grass/caf\\xe9.jpg": "its name is not valid UTF-8",
          f"{root}/chien\\xe9": "its name is not valid UTF-8"}


def add_broken_links(root: str) -> Dict[str, str]:
  """A dangling link and a link to itself, in red_car/. Returns {path: its reason's start}."""
  os.symlink("missing.jpg", os.path.join(root, "red_car", "dangling.jpg"))
  os.symlink("self.jpg", os.path.join(root, "red_car", "self.jpg"))
  return {f"{root}/red_car/dangling.jpg": "is a link to missing.jpg, which does not exist",
          f"{root}/red_car/self.jpg": "is a link that loops back to itself"}


def add_links_around(root: str, outside: str) -> Tuple[Dict[str, str], Dict[str, str]]:
  """A link from a class folder to the folder above it (a loop), a link to a photo outside the
  folder, a link to a photo that is read as itself, and a link to a photo in a hidden folder
  (read once, through the link). Returns ({path: its reason's start}, {key read through a link:
  its class})."""
  os.makedirs(outside, exist_ok=True)
  with open(os.path.join(outside, "photo.jpg"), "wb") as f:
    f.write(jpeg())
  os.makedirs(os.path.join(root, ".originals"))
  with open(os.path.join(root, ".originals", "kept.jpg"), "wb") as f:
    f.write(jpeg())
  first_grass = sorted(name for name in os.listdir(os.path.join(root, "grass"))
                       if os.path.isfile(os.path.join(root, "grass", name)))[0]
  links = {"blue sky/up": "..", "grass/outside.jpg": os.path.join(outside, "photo.jpg"),
           "grass/twin.jpg": first_grass, "red_car/kept.jpg": "../.originals/kept.jpg"}
  for relative, target in links.items():
    os.symlink(target, os.path.join(root, relative))
  return ({f"{root}/blue sky/up": "is a link to a folder (..); links to folders are not followed",
           f"{root}/grass/outside.jpg": "is a link out of the image folder",
           f"{root}/grass/twin.jpg": f"is a link to grass/{first_grass}, which is read already"},
          {"red_car/kept.jpg": "red_car"})
