"""Three corruptions of CIFAR-10-C-bar (Mintun, Kirillov & Xie, NeurIPS 2021), for the
validation shift only: a published set chosen to be perceptually unlike the 15 benchmark
corruptions, at its own CIFAR-10 severities. Written here from the paper's definitions
(facebookresearch/augmentation-corruption, `imagenet_c_bar/corrupt.py`, `cifar10_c_bar.csv`).
Why these three: docs/robustness.md, "A second validation shift".

Each takes an HxWx3 uint8 image and a severity (1-5) and draws from the global np.random,
which `reference_corruptions.corrupt` seeds per (image, corruption, severity).
"""
import numpy as np
from scipy import ndimage

# C-bar's CIFAR-10 levels (0-10) for severities 1-5.
BROWNISH_NOISE_LEVELS = (2.5, 4.0, 5.5, 6.5, 7.0)
CIRCULAR_MOTION_BLUR_LEVELS = (2.8, 3.6, 4.4, 5.2, 6.0)
PINCH_AND_TWIRL_LEVELS = (5.5, 6.0, 6.5, 8.5, 10.0)
_BLUR_STEPS = 21  # Rotated copies averaged by circular_motion_blur.
_WARP_CELLS = 3  # pinch_and_twirl's grid on a 32x32 image (5 on 224x224 ones).


def brownish_noise(image: np.ndarray, severity: int) -> np.ndarray:
  """Additive noise with amplitude spectrum 1 / (f^2 + 1) (f: distance from zero frequency, in
  frequency steps) and random phases, per channel, scaled to deviation 6.4 x level grey
  levels: smooth blotches rather than speckle's per-pixel grain."""
  height, width, channels = image.shape
  rows, columns = np.meshgrid(np.arange(height) - height // 2, np.arange(width) - width // 2,
                              indexing="ij")
  amplitude = np.fft.ifftshift(1.0 / (rows ** 2 + columns ** 2 + 1.0))
  noise = np.empty(image.shape)
  for channel in range(channels):
    phases = np.random.uniform(0.0, 2.0 * np.pi, (height, width))
    field = np.real(np.fft.ifft2(amplitude * np.exp(1j * phases)))
    noise[..., channel] = field / field.std()
  intensity = BROWNISH_NOISE_LEVELS[severity - 1] * 6.4
  return np.clip(image + intensity * noise, 0, 255)


def circular_motion_blur(image: np.ndarray, severity: int) -> np.ndarray:
  """The image turned about its centre through +-1.5 x level degrees in 21 steps, weighted
  exp(-2 u^2) (u: the step's place in [-1, 1]) and averaged: the blur of a camera that rotates
  while the shutter is open."""
  sweep = CIRCULAR_MOTION_BLUR_LEVELS[severity - 1] * 1.5
  steps = np.linspace(-1.0, 1.0, _BLUR_STEPS)
  weights = np.exp(-2.0 * steps ** 2)
  pixels = image.astype(np.float64)
  turned = [ndimage.rotate(pixels, step * sweep, reshape=False) for step in steps]
  return np.clip(np.tensordot(weights / weights.sum(), np.stack(turned), axes=1), 0, 255)


def pinch_and_twirl(image: np.ndarray, severity: int) -> np.ndarray:
  """Each cell of a 3 x 3 grid warped about its centre, inside the cell's inscribed circle:
  pulled in (pinch 0.1 + 0.04 x level) and turned by up to +-pi/20 x level (the sign drawn per
  cell), most at the centre and nothing at the circle. A local warp, elastic's kind. Sampled
  bilinearly from the unwarped image (C-bar reads the cells already warped)."""
  level = PINCH_AND_TWIRL_LEVELS[severity - 1]
  height, width = image.shape[:2]
  angles = np.random.choice([-1.0, 1.0], (_WARP_CELLS, _WARP_CELLS)) * level * np.pi / 20.0
  pinch = 0.1 + 0.04 * level
  cell = height // _WARP_CELLS
  radius = cell / 2.0
  rows, columns = np.mgrid[0:height, 0:width].astype(np.float64)
  source_rows, source_columns = rows.copy(), columns.copy()
  for i in range(_WARP_CELLS):
    for j in range(_WARP_CELLS):
      centre_row, centre_column = j * cell + radius, i * cell + radius
      inside = np.zeros((height, width), bool)
      inside[j * cell:(j + 1) * cell, i * cell:(i + 1) * cell] = True
      d_row, d_column = rows - centre_row, columns - centre_column
      distance = np.hypot(d_row, d_column)
      inside &= (distance <= radius) & (np.round(distance, 3) > 0)
      fraction = distance[inside] / radius
      stretch = np.sin(0.5 * np.pi * fraction) ** (-pinch)
      turn = angles[i, j] * (1.0 - fraction) ** 2
      d_row, d_column = d_row[inside] * stretch, d_column[inside] * stretch
      source_rows[inside] = centre_row + d_row * np.cos(turn) - d_column * np.sin(turn)
      source_columns[inside] = centre_column + d_row * np.sin(turn) + d_column * np.cos(turn)
  warped = [ndimage.map_coordinates(image[..., channel].astype(np.float64),
                                    [source_rows, source_columns], order=1, mode="nearest")
            for channel in range(image.shape[2])]
  return np.clip(np.stack(warped, axis=-1), 0, 255)


CORRUPTIONS = {"brownish_noise": brownish_noise, "circular_motion_blur": circular_motion_blur,
               "pinch_and_twirl": pinch_and_twirl}
