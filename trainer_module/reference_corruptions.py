"""The common corruptions of Hendrycks & Dietterich (ICLR 2019), run with tensorflow-datasets'
own implementation (`tensorflow_datasets/image_classification/corruptions.py`).

That module is the code behind the corrupted ImageNet (ImageNet-C) and so carries ImageNet-C's
severity constants. This module makes it usable on the pipeline's 32x32 RGB images:
- deterministic per example: tfds draws from the global `np.random` state (and
  `skimage.util.random_noise` from a fresh generator); each call here runs under a seed made from
  (example key, corruption, severity), with the global state restored afterwards;
- frost, snow and motion blur are written for 224x224 images (frost crops 224x224 from its
  texture, snow reshapes to 224x224, motion blur's grey-image check compares with (224, 224)):
  those three run on the image resized to 224x224 and are resized back; the rest run at 32x32;
- motion blur and snow call ImageMagick's `convert`, and frost needs the frost textures (taken
  from the `imagecorruptions` package in the lock): `unavailable()` names what is missing, and
  the config refuses those corruptions on a machine without it.
Names are those of tfds' `cifar10_corrupted` configs (`frosted_glass_blur`, `elastic`), so a
slice means the same corruption for every dataset.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import threading
from typing import Callable, Dict, Iterator, Optional, Tuple

import numpy as np
from PIL import Image

SEVERITIES = (1, 2, 3, 4, 5)
# Hendrycks & Dietterich's four families of the 15 benchmark corruptions, and of the four extra
# ones (held out in the paper for validation; none is in the default robustness set).
FAMILIES = {
    "noise": ("gaussian_noise", "shot_noise", "impulse_noise"),
    "blur": ("defocus_blur", "frosted_glass_blur", "motion_blur", "zoom_blur"),
    "weather": ("snow", "frost", "fog", "brightness"),
    "digital": ("contrast", "elastic", "pixelate", "jpeg_compression"),
}
EXTRA_FAMILIES = {"noise": ("speckle_noise",), "blur": ("gaussian_blur",),
                  "weather": ("spatter",), "digital": ("saturate",)}
BENCHMARK_CORRUPTIONS = tuple(name for names in FAMILIES.values() for name in names)
EXTRA_CORRUPTIONS = tuple(name for names in EXTRA_FAMILIES.values() for name in names)
ALL_CORRUPTIONS = BENCHMARK_CORRUPTIONS + EXTRA_CORRUPTIONS
FAMILY_OF = {name: family for table in (FAMILIES, EXTRA_FAMILIES)
             for family, names in table.items() for name in names}

_TFDS_NAMES = {"frosted_glass_blur": "glass_blur", "elastic": "elastic_transform"}
_FULL_SIZE = 224  # The image side that frost, snow and motion blur are written for.
_AT_FULL_SIZE = ("frost", "snow", "motion_blur")
_NEEDS_IMAGEMAGICK = ("snow", "motion_blur")
_FROST_TEXTURE_COUNT = 5  # tfds' frost draws one of FROST_FILENAMES[0:5].
_lock = threading.Lock()  # The corruptions share the global np.random state.


@functools.lru_cache(maxsize=None)
def imagemagick_convert() -> Optional[str]:
  """The path of a working ImageMagick `convert` (or IM7 `magick`), or None."""
  for name in ("magick", "convert"):
    path = shutil.which(name)
    if not path:
      continue
    try:
      version = subprocess.run([path, "-version"], capture_output=True, text=True, timeout=30,
                               check=False).stdout
    except OSError:
      continue
    if version.startswith("Version: ImageMagick"):
      return path
  return None


@functools.lru_cache(maxsize=None)
def frost_textures() -> Tuple[str, ...]:
  """The frost textures of ImageNet-C, as shipped in the `imagecorruptions` package (found
  without importing it: its import needs pkg_resources, which Python 3.12 setups may lack)."""
  spec = importlib.util.find_spec("imagecorruptions")
  if spec is None or not spec.submodule_search_locations:
    return ()
  directory = os.path.join(list(spec.submodule_search_locations)[0], "frost")
  names = [f"frost{i}.png" for i in range(1, 4)] + [f"frost{i}.jpg" for i in range(4, 7)]
  paths = tuple(os.path.join(directory, name) for name in names)
  return paths if all(os.path.isfile(path) for path in paths) else ()


def subsample(records: list, count: int) -> list:
  """`count` records (tuples whose first item is a string key) chosen by a hash of their key
  (all when count is 0), in key order: the same images in every run and every slice."""
  if count <= 0 or count >= len(records):
    return records
  ranked = sorted(records, key=lambda r: hashlib.sha256(r[0].encode("utf-8")).digest())
  return sorted(ranked[:count])


def unavailable(names) -> Dict[str, str]:
  """For each of `names` that cannot run on this machine, why not."""
  missing = {}
  for name in names:
    if name in _NEEDS_IMAGEMAGICK and imagemagick_convert() is None:
      missing[name] = ("needs ImageMagick's `convert` on PATH (Debian: apt-get install "
                       "imagemagick)")
    elif name == "frost" and not frost_textures():
      missing[name] = "needs the frost textures of the `imagecorruptions` package (in the lock)"
  return missing


def _tfds_module():
  from tensorflow_datasets.image_classification import corruptions  # Lazy: imports TF.
  return corruptions


def _seed(key: str, corruption: str, severity: int) -> int:
  digest = hashlib.sha256(f"{key}/{corruption}/{severity}".encode("utf-8")).digest()
  return int.from_bytes(digest[:4], "big")


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
  """Global np.random seeded, skimage's random_noise seeded, tfds pointed at ImageMagick and the
  frost textures; everything put back afterwards."""
  import skimage.util
  tfds_corruptions = _tfds_module()
  with _lock:
    state = np.random.get_state()
    random_noise = skimage.util.random_noise
    imagemagick_bin, frost_filenames = (tfds_corruptions._imagemagick_bin,  # pylint: disable=protected-access
                                        tfds_corruptions.FROST_FILENAMES)
    np.random.seed(seed)
    skimage.util.random_noise = functools.partial(random_noise, rng=seed)
    convert = imagemagick_convert()
    if convert:
      tfds_corruptions._imagemagick_bin = lambda: convert  # pylint: disable=protected-access
    tfds_corruptions.FROST_FILENAMES = list(frost_textures()[:_FROST_TEXTURE_COUNT])
    try:
      yield
    finally:
      np.random.set_state(state)
      skimage.util.random_noise = random_noise
      tfds_corruptions._imagemagick_bin = imagemagick_bin  # pylint: disable=protected-access
      tfds_corruptions.FROST_FILENAMES = frost_filenames


def _resized(image: np.ndarray, height: int, width: int) -> np.ndarray:
  """Bicubic up, area-averaging (box) down: no aliasing either way."""
  resample = Image.BICUBIC if height >= image.shape[0] else Image.BOX
  return np.asarray(Image.fromarray(image).resize((width, height), resample))


def _function(corruption: str) -> Callable[[np.ndarray, int], np.ndarray]:
  return getattr(_tfds_module(), _TFDS_NAMES.get(corruption, corruption))


def _spatter(image: np.ndarray, severity: int) -> np.ndarray:
  """tfds' spatter, except where no drop lands: it scales the liquid mask by its maximum, which
  is 0/0 when the thresholded liquid layer is empty (often enough on 32x32 images at severities
  1-3), and returns a black image. No drop is no spatter: the image unchanged."""
  with np.errstate(invalid="raise"):
    try:
      return np.asarray(_function("spatter")(image, severity))
    except FloatingPointError:
      return image


def corrupt(image: np.ndarray, corruption: str, severity: int, key: str) -> np.ndarray:
  """`image` (HxWx3 uint8) under `corruption` at `severity` (1-5), as uint8 of the same shape;
  the same (image, corruption, severity, key) gives the same output on every run."""
  if corruption not in FAMILY_OF:
    raise ValueError(f"Unknown corruption {corruption!r}; expected one of {ALL_CORRUPTIONS}.")
  if severity not in SEVERITIES:
    raise ValueError(f"Severity {severity!r} is not one of {SEVERITIES}.")
  if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
    raise ValueError(f"Expected an RGB uint8 image, got {image.dtype} {image.shape}.")
  reason = unavailable([corruption]).get(corruption)
  if reason:
    raise RuntimeError(f"Corruption {corruption!r} cannot run here: it {reason}.")
  height, width = image.shape[:2]
  full_size = corruption in _AT_FULL_SIZE
  source = _resized(image, _FULL_SIZE, _FULL_SIZE) if full_size else image
  with _seeded(_seed(key, corruption, severity)):
    if corruption == "spatter":
      corrupted = _spatter(source, severity)
    else:
      corrupted = np.asarray(_function(corruption)(source, severity))
  corrupted = np.clip(np.around(corrupted), 0, 255).astype(np.uint8)  # Some return float.
  if full_size:
    corrupted = _resized(corrupted, height, width)
  if corrupted.shape != image.shape:
    raise RuntimeError(f"Corruption {corruption!r} returned shape {corrupted.shape} for an "
                       f"image of shape {image.shape}.")
  return corrupted
