"""CIFAR-10-C-style corruptions (Hendrycks & Dietterich, ICLR 2019) of 32x32 RGB uint8 images.

Used to make the robustness set of datasets that have no published corrupted version (the
embedded digits, TFRecord inputs). Names and the five severities' strengths follow CIFAR-10-C's
CIFAR settings, so `gaussian_noise` at severity 3 here means what it means in
`cifar10_corrupted/gaussian_noise_3`. Deterministic: the noise of an image is seeded by its key,
the corruption and the severity.
"""
from __future__ import annotations

import hashlib
import io

import numpy as np
from PIL import Image
from scipy import ndimage

SEVERITIES = (1, 2, 3, 4, 5)

# Per-severity strengths (CIFAR-10-C's CIFAR settings).
_GAUSSIAN_NOISE_STD = (0.04, 0.06, 0.08, 0.09, 0.10)  # On [0, 1] pixel values.
_GAUSSIAN_BLUR_SIGMA = (0.4, 0.6, 0.7, 0.8, 1.0)  # Pixels.
_DEFOCUS_DISK = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1.0, 0.2), (1.5, 0.1))  # Radius, sigma.
_CONTRAST_FACTOR = (0.75, 0.5, 0.4, 0.3, 0.15)  # Kept share of the deviation from the mean.
_JPEG_QUALITY = (80, 65, 58, 50, 40)
_PIXELATE_SCALE = (0.95, 0.9, 0.85, 0.75, 0.65)  # Downscale factor before upscaling back.


def _seed(key: str, corruption: str, severity: int) -> int:
  digest = hashlib.sha256(f"{key}/{corruption}/{severity}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big")


def _to_uint8(image01: np.ndarray) -> np.ndarray:
  return np.round(np.clip(image01, 0.0, 1.0) * 255.0).astype(np.uint8)


def _blur_channels(image01: np.ndarray, sigma: float) -> np.ndarray:
  return np.stack([ndimage.gaussian_filter(image01[:, :, c], sigma, mode="reflect")
                   for c in range(image01.shape[2])], axis=2)


def gaussian_noise(image: np.ndarray, severity: int, key: str) -> np.ndarray:
  rng = np.random.default_rng(_seed(key, "gaussian_noise", severity))
  x = image / 255.0
  return _to_uint8(x + rng.normal(0.0, _GAUSSIAN_NOISE_STD[severity - 1], size=x.shape))


def gaussian_blur(image: np.ndarray, severity: int, key: str) -> np.ndarray:
  del key
  return _to_uint8(_blur_channels(image / 255.0, _GAUSSIAN_BLUR_SIGMA[severity - 1]))


def defocus_blur(image: np.ndarray, severity: int, key: str) -> np.ndarray:
  """Convolution with a disk (the out-of-focus lens), then a slight Gaussian anti-aliasing."""
  del key
  radius, sigma = _DEFOCUS_DISK[severity - 1]
  half = max(int(np.ceil(radius)), 1)
  y, x = np.mgrid[-half:half + 1, -half:half + 1]
  disk = ((x**2 + y**2) <= radius**2).astype(np.float64)
  disk = ndimage.gaussian_filter(disk / disk.sum(), sigma, mode="constant")
  disk /= disk.sum()
  x01 = image / 255.0
  return _to_uint8(np.stack([ndimage.convolve(x01[:, :, c], disk, mode="reflect")
                             for c in range(x01.shape[2])], axis=2))


def contrast(image: np.ndarray, severity: int, key: str) -> np.ndarray:
  del key
  x = image / 255.0
  mean = x.mean(axis=(0, 1), keepdims=True)
  return _to_uint8((x - mean) * _CONTRAST_FACTOR[severity - 1] + mean)


def jpeg_compression(image: np.ndarray, severity: int, key: str) -> np.ndarray:
  del key
  buffer = io.BytesIO()
  Image.fromarray(image, mode="RGB").save(buffer, format="JPEG",
                                          quality=_JPEG_QUALITY[severity - 1])
  with Image.open(io.BytesIO(buffer.getvalue())) as decoded:
    return np.asarray(decoded.convert("RGB"))


def pixelate(image: np.ndarray, severity: int, key: str) -> np.ndarray:
  del key
  height, width = image.shape[:2]
  small = int(round(width * _PIXELATE_SCALE[severity - 1]))
  pil = Image.fromarray(image, mode="RGB").resize((small, small), Image.BOX)
  return np.asarray(pil.resize((width, height), Image.BOX))


CORRUPTIONS = {f.__name__: f for f in (gaussian_noise, gaussian_blur, defocus_blur, contrast,
                                       jpeg_compression, pixelate)}
# The corruptions of tensorflow-datasets' cifar10_corrupted (CIFAR-10-C), by config name.
CIFAR10_C_CORRUPTIONS = (
    "brightness", "contrast", "defocus_blur", "elastic", "fog", "frost", "frosted_glass_blur",
    "gaussian_blur", "gaussian_noise", "impulse_noise", "jpeg_compression", "motion_blur",
    "pixelate", "saturate", "shot_noise", "snow", "spatter", "speckle_noise", "zoom_blur")
DEFAULT_CORRUPTIONS = ("gaussian_noise", "gaussian_blur", "defocus_blur", "contrast",
                       "jpeg_compression", "pixelate")


def corrupt(image: np.ndarray, corruption: str, severity: int, key: str) -> np.ndarray:
  """`image` (32x32x3 uint8) with `corruption` at `severity` (1-5), as uint8 of the same shape."""
  if corruption not in CORRUPTIONS:
    raise ValueError(f"Unknown corruption {corruption!r}; expected one of {sorted(CORRUPTIONS)}.")
  if severity not in SEVERITIES:
    raise ValueError(f"Severity {severity!r} is not one of {SEVERITIES}.")
  if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
    raise ValueError(f"Expected an RGB uint8 image, got {image.dtype} {image.shape}.")
  corrupted = CORRUPTIONS[corruption](image, severity, key)
  assert corrupted.shape == image.shape and corrupted.dtype == np.uint8
  return corrupted
