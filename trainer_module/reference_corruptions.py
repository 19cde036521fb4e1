"""The common corruptions of Hendrycks & Dietterich (ICLR 2019), run with tensorflow-datasets'
own implementation and made deterministic per example and usable on the pipeline's 32x32 RGB
images. How (seeding, 224x224, in-process ImageMagick): docs/pipeline.md, "Evaluation and the
gate".
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import types
from typing import Callable, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
from PIL import Image

from trainer_module import c_bar_corruptions

SEVERITIES = (1, 2, 3, 4, 5)
# Hendrycks & Dietterich's four families of the 15 benchmark corruptions, and of the four extra
# ones (held out in the paper for validation; none is in the default robustness set).
# Names are those of tfds' `cifar10_corrupted` configs, so a slice means the same corruption
# for every dataset.
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
# The project's own corruptions, for the validation shift. Light that falls unevenly across
# the picture. On grayscale images (the digits) saturate changes nothing at severities 1-3, so
# the four extra corruptions hold no change of overall intensity, while three of the 15
# (brightness, contrast, fog) are one, and the largest pixel changes of all. Why it is not one
# of the 15: docs/robustness.md, "A validation shift with a change of light".
# And a blur as strong as gaussian blur by another mechanism, so the blur kind keeps a strong
# member when gaussian blur is left out (docs/robustness.md, "A blur as strong as gaussian blur").
OWN_FAMILIES = {"weather": ("uneven_illumination",), "blur": ("butterworth_blur",)}
OWN_CORRUPTIONS = tuple(name for names in OWN_FAMILIES.values() for name in names)
# Three of CIFAR-10-C-bar's (trainer_module/c_bar_corruptions.py): another member for noise and
# blur, and for the digital kind one that acts on grey images. With one member per kind the
# shift's far-out images were all one blur, and leaving a corruption out removed its kind.
# docs/robustness.md, "A second validation shift".
C_BAR_FAMILIES = {"noise": ("brownish_noise",), "blur": ("circular_motion_blur",),
                  "digital": ("pinch_and_twirl",)}
C_BAR_CORRUPTIONS = tuple(name for names in C_BAR_FAMILIES.values() for name in names)
# What the calibration is fitted and the model chosen on; never evaluated in the same run.
VALIDATION_CORRUPTIONS = EXTRA_CORRUPTIONS + OWN_CORRUPTIONS + C_BAR_CORRUPTIONS
# What a robustness set can hold: tfds' 19 (cifar10_corrupted has no other).
ALL_CORRUPTIONS = BENCHMARK_CORRUPTIONS + EXTRA_CORRUPTIONS
FAMILY_OF = {name: family for table in (FAMILIES, EXTRA_FAMILIES, OWN_FAMILIES, C_BAR_FAMILIES)
             for family, names in table.items() for name in names}
# The lift at the lit edge, as a fraction of white, by severity: the mean lift (half of it) is at
# most tfds' brightness lift (0.1-0.5 on every pixel), the lit edge's above it.
_ILLUMINATION_LIFT = (0.2, 0.3, 0.4, 0.5, 0.6)
# Butterworth cut-offs (fractions of the sampling frequency) by severity: where its mean pixel
# change on 20 digits equals gaussian blur's at the same severity (4.2, 13.2, 22.7, 30.9, 43.4
# grey levels), found by bisection; no label or model read.
_BUTTERWORTH_CUTOFF = (0.153, 0.084, 0.058, 0.045, 0.031)
_BUTTERWORTH_PAD = 8  # Edge-extended, so the spectrum's wrap-around does not join far edges.


def family_of_slice(slice_name: str) -> Optional[str]:
  """The family of a corruption_severity slice name ("snow_5": weather); None for any other."""
  return FAMILY_OF.get(str(slice_name).rsplit("_", 1)[0])

_TFDS_NAMES = {"frosted_glass_blur": "glass_blur", "elastic": "elastic_transform"}
_FULL_SIZE = 224  # The image side that frost, snow and motion blur are written for.
_AT_FULL_SIZE = ("frost", "snow", "motion_blur")
_NEEDS_IMAGEMAGICK = ("snow", "motion_blur")
_FROST_TEXTURE_COUNT = 5  # tfds' frost draws one of FROST_FILENAMES[0:5].
_lock = threading.Lock()  # The corruptions share the global np.random state.
# corrupt_all's pool pays for its start-up (a fresh interpreter per worker, ~5 s) from about
# this many images under the ImageMagick corruptions (~30-40 ms each in-process, one core,
# against ~0.1-9 ms for the others): bench/corruptions.py on 2 cores, 200 of them (and 1,300
# others) 0.92x, 400 1.26x, 1,000 1.53x.
POOL_MIN_SLOW_IMAGES = 300
_POOL_CHUNK = 8  # Requests per task sent to a worker: small enough to balance the slow ones.
Request = Tuple[np.ndarray, str, int, str]  # corrupt()'s arguments: image, name, severity, key.


@functools.lru_cache(maxsize=None)
def magick_wand() -> Optional[types.ModuleType]:
  """`wand.image` when ImageMagick's MagickWand library loads in this process, or None."""
  try:
    from wand import image  # Loads libMagickWand (ImportError when it is not installed).
  except ImportError:
    return None
  return image


def _convert_in_process(args: Sequence[str]) -> bytes:
  """Runs `convert INPUT -motion-blur RADIUSxSIGMA+ANGLE OUTPUT`, the only ImageMagick call tfds'
  snow and motion blur make, as MagickWand's MotionBlurImage on the same files: the pixels
  `convert` writes (tested), without a process per image (~110 ms an image here, ~30 in-process;
  bench/corruptions.py)."""
  try:
    _, source, option, geometry, target = args
    radius, sigma_angle = geometry.split("x", 1)
    sigma, angle = sigma_angle.split("+", 1)
    if option != "-motion-blur":
      raise ValueError(option)
    radius, sigma, angle = float(radius), float(sigma), float(angle)
  except ValueError as error:
    raise ValueError(f"tfds asked ImageMagick for {list(args)!r}; only "
                     "`convert INPUT -motion-blur RxS+A OUTPUT` runs in-process") from error
  with magick_wand().Image(filename=source) as picture:
    picture.motion_blur(radius=radius, sigma=sigma, angle=angle)
    # PNG is lossless at every zlib level: level 0 writes the same pixels in a quarter of the
    # time (quality's tens digit is PNG's zlib level; tfds reads the file back once).
    picture.compression_quality = 1
    picture.save(filename=target)
  return b""


_IN_PROCESS_IMAGEMAGICK = types.SimpleNamespace(check_output=_convert_in_process)


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


FROST_TEXTURES_PREFIX = "frost-textures-"
_ABANDONED_AFTER_SECONDS = 60  # Longer than a process takes from mkdtemp to locking its dir.


def remove_abandoned_texture_dirs(parent: str) -> None:
  """Deletes the texture directories of processes that were killed (atexit never ran): a
  directory's lock is held by its process while it lives and released by the kernel when it
  dies, so an unlocked directory that is not brand new belongs to no one."""
  import fcntl
  for name in os.listdir(parent):
    path = os.path.join(parent, name)
    if not name.startswith(FROST_TEXTURES_PREFIX) or not os.path.isdir(path):
      continue
    try:
      descriptor = os.open(path, os.O_RDONLY)
    except OSError:
      continue  # Another user's, or just removed.
    try:
      fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
      if os.stat(path).st_mtime < time.time() - _ABANDONED_AFTER_SECONDS:
        shutil.rmtree(path, ignore_errors=True)
    except BlockingIOError:
      pass  # In use by a live process.
    finally:
      os.close(descriptor)


@functools.lru_cache(maxsize=None)
def _uncompressed_frost_textures() -> Tuple[str, ...]:
  """The frost textures tfds draws from, decoded once per process and kept as BMP files: tfds'
  frost reads its texture from a file for every image, and decoding the PNG or JPEG (up to
  900x600) was most of its time. cv2 reads the BMP back to the same pixels. The directory is
  removed at exit, or, after a kill, by the next process that makes one."""
  import cv2
  import fcntl
  remove_abandoned_texture_dirs(tempfile.gettempdir())
  directory = tempfile.mkdtemp(prefix=FROST_TEXTURES_PREFIX)
  # The descriptor is never closed: its lock marks the directory as in use while we live.
  fcntl.flock(os.open(directory, os.O_RDONLY), fcntl.LOCK_SH)
  atexit.register(shutil.rmtree, directory, ignore_errors=True)
  paths = []
  for index, source in enumerate(frost_textures()[:_FROST_TEXTURE_COUNT]):
    path = os.path.join(directory, f"frost{index}.bmp")
    if not cv2.imwrite(path, cv2.imread(source)):
      raise OSError(f"Could not write the decoded frost texture {source} to {path}.")
    paths.append(path)
  return tuple(paths)


def unavailable(names) -> Dict[str, str]:
  """For each of `names` that cannot run on this machine, why not."""
  missing = {}
  for name in names:
    if name in _NEEDS_IMAGEMAGICK and magick_wand() is None:
      missing[name] = ("needs ImageMagick's MagickWand library, which Wand loads (Debian: "
                       "apt-get install imagemagick)")
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
  """Global np.random seeded, skimage's random_noise seeded, tfds' ImageMagick calls run
  in-process and its frost drawn from the decoded textures; everything put back afterwards."""
  import skimage.util
  tfds_corruptions = _tfds_module()
  with _lock:
    state = np.random.get_state()
    random_noise = skimage.util.random_noise
    subprocess_module = tfds_corruptions.subprocess
    frost_filenames = tfds_corruptions.FROST_FILENAMES
    np.random.seed(seed)
    skimage.util.random_noise = functools.partial(random_noise, rng=seed)
    tfds_corruptions.subprocess = _IN_PROCESS_IMAGEMAGICK
    tfds_corruptions.FROST_FILENAMES = (list(_uncompressed_frost_textures())
                                        if frost_textures() else [])
    try:
      yield
    finally:
      np.random.set_state(state)
      skimage.util.random_noise = random_noise
      tfds_corruptions.subprocess = subprocess_module
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


def _uneven_illumination(image: np.ndarray, severity: int) -> np.ndarray:
  """Light added along a ramp in a random direction: nothing at the dark edge, up to
  _ILLUMINATION_LIFT[severity - 1] of white at the lit one, clipped to white."""
  height, width = image.shape[:2]
  angle = np.random.uniform(0.0, 2.0 * np.pi)
  rows, columns = np.mgrid[0:height, 0:width]
  ramp = np.cos(angle) * columns + np.sin(angle) * rows
  ramp = (ramp - ramp.min()) / (ramp.max() - ramp.min())
  lifted = image / 255.0 + _ILLUMINATION_LIFT[severity - 1] * ramp[..., None]
  return np.clip(lifted, 0.0, 1.0) * 255.0


def _butterworth_blur(image: np.ndarray, severity: int) -> np.ndarray:
  """scikit-image's squared Butterworth low-pass of order 2 on each channel: gain
  1 / (1 + (f / cutoff)^4), flat to the cut-off and falling as f^-4 after it, where a Gaussian
  blur's falls from the start. Deterministic."""
  from skimage.filters import butterworth
  return butterworth(image.astype(np.float64), _BUTTERWORTH_CUTOFF[severity - 1],
                     high_pass=False, order=2.0, channel_axis=-1, npad=_BUTTERWORTH_PAD)


# Corruptions not run by tfds' function of the same name: spatter mended, and those tfds lacks.
_OWN_FUNCTIONS = {"spatter": _spatter, "uneven_illumination": _uneven_illumination,
                  "butterworth_blur": _butterworth_blur, **c_bar_corruptions.CORRUPTIONS}


def corrupt(image: np.ndarray, corruption: str, severity: int, key: str) -> np.ndarray:
  """`image` (HxWx3 uint8) under `corruption` at `severity` (1-5), as uint8 of the same shape;
  the same (image, corruption, severity, key) gives the same output on every run."""
  if corruption not in FAMILY_OF:
    raise ValueError(f"Unknown corruption {corruption!r}; expected one of {tuple(FAMILY_OF)}.")
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
    function = _OWN_FUNCTIONS.get(corruption) or _function(corruption)
    corrupted = np.asarray(function(source, severity))
  corrupted = np.clip(np.around(corrupted), 0, 255).astype(np.uint8)  # Some return float.
  if full_size:
    corrupted = _resized(corrupted, height, width)
  if corrupted.shape != image.shape:
    raise RuntimeError(f"Corruption {corruption!r} returned shape {corrupted.shape} for an "
                       f"image of shape {image.shape}.")
  return corrupted


def _corrupt_request(request: Request) -> np.ndarray:
  return corrupt(*request)


def pool_size(requests: Sequence[Request], workers: int = 0) -> int:
  """How many processes corrupt_all uses: `workers` when > 0; else (auto) one per CPU this process
  may run on when at least POOL_MIN_SLOW_IMAGES requests are ImageMagick's, and 1 otherwise
  (a few cheap images do not pay for starting interpreters)."""
  if workers < 0:
    raise ValueError(f"workers must be >= 0 (0 = auto), got {workers}.")
  if workers:
    return workers
  slow = sum(1 for request in requests if request[1] in _NEEDS_IMAGEMAGICK)
  return len(os.sched_getaffinity(0)) if slow >= POOL_MIN_SLOW_IMAGES else 1


def corrupt_all(requests: Sequence[Request], workers: int = 0) -> Iterator[np.ndarray]:
  """corrupt(*request) for each request, in order, with pool_size(requests, workers) processes.

  The pool's processes are started with `spawn`: forking a process that has TensorFlow loaded
  (the Trainer, TFX's executors) is unsafe. Every output is the one corrupt() gives in this
  process: a request's randomness depends on its key, corruption and severity only."""
  processes = min(pool_size(requests, workers), len(requests))
  if processes <= 1:
    for request in requests:
      yield corrupt(*request)
    return
  with multiprocessing.get_context("spawn").Pool(processes) as pool:
    yield from pool.imap(_corrupt_request, requests, chunksize=_POOL_CHUNK)
