"""tfds' reference corruptions and the validation shift's own ones on 32x32x3 uint8 images: all
24 run, deterministic per key."""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from trainer_module import reference_corruptions as corruptions
from components.image_sources import digits_to_images
from trainer_module import augmix


@pytest.fixture(scope="module")
def images():
  from sklearn.datasets import load_digits
  digits = digits_to_images(load_digits().images[:2])
  colour = np.random.default_rng(0).integers(0, 256, (1, 32, 32, 3), dtype=np.uint8)
  return np.concatenate([digits, colour])  # Grey digits (as RGB) and a colour image.


@pytest.mark.parametrize("name", tuple(corruptions.FAMILY_OF))
def test_each_corruption_runs_on_32x32_rgb_and_is_deterministic_per_key(name, images):
  for severity in corruptions.SEVERITIES:
    for index, image in enumerate(images):
      output = corruptions.corrupt(image, name, severity, f"k{index}")
      assert output.shape == (32, 32, 3) and output.dtype == np.uint8
      np.testing.assert_array_equal(output, corruptions.corrupt(image, name, severity,
                                                                f"k{index}"))
  # The strongest severity changes the images (saturate leaves grey pixels grey).
  changed = [not np.array_equal(corruptions.corrupt(image, name, 5, "k"), image)
             for image in images]
  assert changed[-1], "severity 5 changes a colour image"


def test_spatter_without_a_drop_leaves_the_image_alone_instead_of_blackening_it():
  """tfds' spatter divides its liquid mask by the mask's maximum: 0/0 when no drop lands."""
  grey = np.full((32, 32, 3), 128, np.uint8)
  np.testing.assert_array_equal(corruptions.corrupt(grey, "spatter", 1, "g0"), grey)
  outputs = [corruptions.corrupt(grey, "spatter", 1, f"g{index}") for index in range(1, 30)]
  assert any(not np.array_equal(output, grey) for output in outputs), "other keys get drops"


def test_random_corruptions_are_seeded_by_the_key_and_leave_global_state_alone(images):
  np.random.seed(123)
  expected = np.random.random()
  np.random.seed(123)
  for name in ("gaussian_noise", "impulse_noise", "frost", "snow", "elastic"):
    a = corruptions.corrupt(images[0], name, 3, "key-a")
    b = corruptions.corrupt(images[0], name, 3, "key-b")
    assert not np.array_equal(a, b), name
  assert np.random.random() == expected


def test_the_15_benchmark_corruptions_in_four_families_and_the_extra_four():
  assert len(corruptions.BENCHMARK_CORRUPTIONS) == 15
  assert set(corruptions.FAMILIES) == {"noise", "blur", "weather", "digital"}
  assert set(corruptions.EXTRA_CORRUPTIONS) == {"gaussian_blur", "saturate", "spatter",
                                                "speckle_noise"}
  from tensorflow_datasets.image_classification import cifar10_corrupted
  assert set(corruptions.BENCHMARK_CORRUPTIONS) == set(cifar10_corrupted.BENCHMARK_CORRUPTIONS)
  assert set(corruptions.EXTRA_CORRUPTIONS) == set(cifar10_corrupted.EXTRA_CORRUPTIONS)


def test_the_validation_shift_is_the_extra_four_two_of_its_own_and_three_of_c_bar():
  assert corruptions.VALIDATION_CORRUPTIONS == corruptions.EXTRA_CORRUPTIONS + (
      "uneven_illumination", "butterworth_blur", "brownish_noise", "circular_motion_blur",
      "pinch_and_twirl")
  assert not set(corruptions.VALIDATION_CORRUPTIONS) & set(corruptions.BENCHMARK_CORRUPTIONS)
  for name in corruptions.OWN_CORRUPTIONS + corruptions.C_BAR_CORRUPTIONS:
    assert name not in corruptions.ALL_CORRUPTIONS  # No robustness set holds it.
  assert corruptions.family_of_slice("uneven_illumination_3") == "weather"
  assert corruptions.family_of_slice("butterworth_blur_5") == "blur"
  assert corruptions.family_of_slice("circular_motion_blur_1") == "blur"


def test_each_kind_but_digital_has_at_least_two_validation_members_that_change_a_grey_digit(
    images):
  """Why the C-bar three: with one member, a kind vanishes when that member is left out. Only
  the digital kind has one (saturate leaves grey pixels grey)."""
  digit = images[0]
  changing = [name for name in corruptions.VALIDATION_CORRUPTIONS
              if not np.array_equal(corruptions.corrupt(digit, name, 1, "k"), digit)]
  kinds = [corruptions.FAMILY_OF[name] for name in changing]
  assert "saturate" not in changing
  assert {kind: kinds.count(kind) for kind in set(kinds)} == {
      "noise": 2, "blur": 3, "weather": 2, "digital": 1}


def _mean_change(digits, name, severity):
  return np.mean([np.abs(corruptions.corrupt(digit, name, severity, f"k{index}").astype(float)
                         - digit).mean() for index, digit in enumerate(digits)])


def test_butterworth_blur_is_as_strong_as_gaussian_blur_at_every_severity():
  """Its cut-offs were set so: the blur kind keeps a member of gaussian blur's strength when
  gaussian blur is left out (circular motion blur changes a few grey levels on digits)."""
  from sklearn.datasets import load_digits
  digits = digits_to_images(load_digits().images[:20])
  for severity in corruptions.SEVERITIES:
    gaussian = _mean_change(digits, "gaussian_blur", severity)
    butterworth = _mean_change(digits, "butterworth_blur", severity)
    assert butterworth == pytest.approx(gaussian, rel=0.05), severity
  assert _mean_change(digits, "circular_motion_blur", 5) < _mean_change(
      digits, "gaussian_blur", 2) / 2


def test_butterworth_blur_keeps_what_lies_below_its_cut_off_and_removes_what_lies_above():
  flat = np.full((32, 32, 3), 100, np.uint8)
  np.testing.assert_array_equal(corruptions.corrupt(flat, "butterworth_blur", 5, "k"), flat)
  rows = np.arange(32)[:, None] * np.ones((1, 32))
  slow = np.repeat((128 + 60 * np.cos(2 * np.pi * rows / 32))[..., None], 3, axis=2)
  fast = np.repeat((128 + 60 * np.cos(np.pi * rows))[..., None], 3, axis=2)  # Nyquist stripes.
  middle = slice(8, 24)  # Away from the edge padding.
  kept = []
  for severity in corruptions.SEVERITIES:
    slow_out, fast_out = (corruptions.corrupt(image.astype(np.uint8), "butterworth_blur",
                                              severity, "k").astype(float)[middle]
                          for image in (slow, fast))
    kept.append(slow_out.std() / slow[middle].std())
    assert fast_out.std() < 0.1 * fast[middle].std(), severity  # Alternate rows are gone.
  assert kept[0] > 0.95 and kept[-1] > 0.5  # One cycle per image passes, less at severity 5...
  assert all(later < earlier for earlier, later in zip(kept, kept[1:]))  # ...as the cut-off falls.


def test_saturate_leaves_grey_digits_alone_where_uneven_illumination_lifts_them(images):
  """Why the validation shift needs a corruption of its own on grey data."""
  digit = images[0]
  for severity in (1, 2, 3):
    np.testing.assert_array_equal(corruptions.corrupt(digit, "saturate", severity, "k"), digit)
  lifts = [corruptions.corrupt(digit, "uneven_illumination", severity, "k").astype(float).mean()
           - digit.mean() for severity in corruptions.SEVERITIES]
  assert lifts[0] > 20 and all(later > earlier for earlier, later in zip(lifts, lifts[1:]))


def test_uneven_illumination_ramps_from_nothing_to_its_lift_in_a_direction_set_by_the_key():
  black = np.zeros((32, 32, 3), np.uint8)
  lit = [corruptions.corrupt(black, "uneven_illumination", 5, f"k{index}") for index in range(4)]
  for output in lit:
    assert output.min() == 0  # The dark edge gets nothing.
    assert output.max() == round(0.6 * 255)  # The lit edge the severity's lift.
    np.testing.assert_array_equal(output[..., 0], output[..., 2])  # White light: grey stays grey.
  assert len({output.tobytes() for output in lit}) == 4  # Each key its own direction.
  white = np.full((32, 32, 3), 255, np.uint8)
  np.testing.assert_array_equal(corruptions.corrupt(white, "uneven_illumination", 5, "k"), white)


def test_augmix_operations_and_the_evaluation_corruptions_are_disjoint():
  """No leakage: the paper leaves out of AugMix every operation that overlaps a corruption."""
  overlapping = {"contrast", "color", "brightness", "sharpness", "saturate"}
  evaluation = set(corruptions.FAMILY_OF)
  assert not set(augmix.OPERATIONS) & evaluation
  assert not set(augmix.OPERATIONS) & overlapping
  assert evaluation & overlapping  # The evaluation set is what those operations would leak.


def test_a_corruption_without_its_dependency_fails_naming_it(monkeypatch, images):
  monkeypatch.setattr(corruptions, "magick_wand", lambda: None)
  assert set(corruptions.unavailable(corruptions.ALL_CORRUPTIONS)) == {"motion_blur", "snow"}
  with pytest.raises(RuntimeError, match="'motion_blur' cannot run here: it needs ImageMagick"):
    corruptions.corrupt(images[0], "motion_blur", 1, "k")


def test_motion_blur_and_snow_in_process_are_the_pixels_of_tfds_convert_process(images,
                                                                                 monkeypatch):
  """tfds runs `convert` per image; the same call through MagickWand gives the same images."""
  images = images[1:]  # A grey digit and the colour image: one `convert` process per image.
  in_process = [corruptions.corrupt(image, name, severity, f"k{index}")
                for name in ("motion_blur", "snow") for severity in corruptions.SEVERITIES
                for index, image in enumerate(images)]
  convert = shutil.which("convert")
  assert convert, "ImageMagick's convert (make system-packages) is the reference here"
  monkeypatch.setattr(corruptions, "_IN_PROCESS_IMAGEMAGICK", subprocess)
  monkeypatch.setattr(corruptions._tfds_module(), "_imagemagick_bin", lambda: convert)
  by_process = [corruptions.corrupt(image, name, severity, f"k{index}")
                for name in ("motion_blur", "snow") for severity in corruptions.SEVERITIES
                for index, image in enumerate(images)]
  for one, other in zip(in_process, by_process):
    np.testing.assert_array_equal(one, other)


@pytest.mark.parametrize("args", [
    ["convert", "in.png", "-blur", "0x3", "out.png"],
    ["convert", "in.png", "-motion-blur", "15x8", "out.png"],
    ["convert", "in.png", "-motion-blur", "15x8+-45", "-strip", "out.png"],
])
def test_any_other_imagemagick_call_is_refused_naming_it(args):
  with pytest.raises(ValueError, match="tfds asked ImageMagick for .*only `convert INPUT "
                                       "-motion-blur RxS\\+A OUTPUT` runs in-process"):
    corruptions._convert_in_process(args)


@pytest.mark.parametrize("name, severity, image, message", [
    ("sparkles", 1, np.zeros((32, 32, 3), np.uint8), "Unknown corruption 'sparkles'"),
    ("contrast", 6, np.zeros((32, 32, 3), np.uint8),
     r"Severity 6 is not one of \(1, 2, 3, 4, 5\)"),
    ("contrast", 1, np.zeros((32, 32), np.uint8), "RGB uint8"),
])
def test_bad_requests_are_refused(name, severity, image, message):
  with pytest.raises(ValueError, match=message):
    corruptions.corrupt(image, name, severity, "k")


def test_a_pool_of_processes_gives_byte_identical_images_in_request_order(images):
  """Spawned workers (TF is loaded here, so no fork) reproduce the single-process output."""
  requests = [(image, name, severity, f"k{index}")
              for name in ("snow", "gaussian_noise", "frost", "contrast")
              for severity in (1, 5) for index, image in enumerate(images)]
  alone = list(corruptions.corrupt_all(requests, workers=1))
  pooled = list(corruptions.corrupt_all(requests, workers=2))
  assert len(pooled) == len(requests)
  for one, other in zip(alone, pooled):
    assert one.dtype == other.dtype and one.tobytes() == other.tobytes()


def test_a_bad_request_in_the_pool_fails_with_its_own_error(images):
  requests = [(images[0], "contrast", 1, "k")] * 3 + [(images[0], "contrast", 6, "k")]
  with pytest.raises(ValueError, match=r"Severity 6 is not one of \(1, 2, 3, 4, 5\)"):
    list(corruptions.corrupt_all(requests, workers=2))


def test_the_pool_starts_only_when_enough_imagemagick_corruptions_pay_for_it(images):
  cheap = [(images[0], name, 1, f"k{i}") for i in range(500) for name in ("frost", "contrast")]
  slow = [(images[0], "motion_blur", 1, f"k{i}") for i in range(corruptions.POOL_MIN_SLOW_IMAGES)]
  assert corruptions.pool_size(cheap) == 1
  assert corruptions.pool_size(cheap + slow[1:]) == 1
  assert corruptions.pool_size(cheap + slow) == len(os.sched_getaffinity(0))
  assert corruptions.pool_size(cheap, workers=3) == 3
  with pytest.raises(ValueError, match="workers must be >= 0"):
    corruptions.pool_size(cheap, workers=-1)


def test_frost_from_the_decoded_textures_is_frost_from_the_shipped_files(images, monkeypatch):
  """Textures are decoded once per process (BMP); the frost images stay the same pixels."""
  cached = [corruptions.corrupt(images[-1], "frost", severity, f"k{severity}")
            for severity in corruptions.SEVERITIES]
  shipped = corruptions.frost_textures()[:5]
  monkeypatch.setattr(corruptions, "_uncompressed_frost_textures", lambda: shipped)
  for severity, image in zip(corruptions.SEVERITIES, cached):
    np.testing.assert_array_equal(
        image, corruptions.corrupt(images[-1], "frost", severity, f"k{severity}"))


def test_the_texture_dir_of_a_killed_process_is_removed_by_the_next_and_a_live_ones_kept(
    tmp_path):
  env = {**os.environ, "TMPDIR": str(tmp_path)}
  script = ("import os, sys, time\n"
            "from trainer_module import reference_corruptions\n"
            "print(os.path.dirname(reference_corruptions._uncompressed_frost_textures()[0]), "
            "flush=True)\n"
            "time.sleep(float(sys.argv[1]))\n")

  def start(seconds):
    process = subprocess.Popen([sys.executable, "-c", script, str(seconds)], env=env,
                               stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()

  killed, killed_dir = start(600)
  alive, alive_dir = start(600)
  try:
    killed.kill()
    killed.wait()
    assert os.path.isdir(killed_dir)  # atexit never ran.
    for path in (killed_dir, alive_dir):  # Both made well before the next run.
      os.utime(path, (time.time() - 3600, time.time() - 3600))
    finished, finished_dir = start(0)
    finished.wait()
    assert not os.path.exists(killed_dir) and not os.path.exists(finished_dir)
    assert os.path.isdir(alive_dir)
  finally:
    alive.kill()
    alive.wait()


def test_a_slice_name_gives_its_corruptions_family_and_anything_else_none():
  assert corruptions.family_of_slice("snow_5") == "weather"
  assert corruptions.family_of_slice("jpeg_compression_1") == "digital"
  assert corruptions.family_of_slice("speckle_noise_3") == "noise"  # A validation corruption.
  assert corruptions.family_of_slice("clean") is None


def test_a_subsample_is_chosen_by_a_hash_of_the_keys_alone_and_listed_in_key_order():
  records = [(f"image-{index}", index) for index in range(10)]
  chosen = corruptions.subsample(records, 3)
  assert chosen == [("image-1", 1), ("image-5", 5), ("image-9", 9)]
  assert corruptions.subsample(records[::-1], 3) == chosen, "whatever order they come in"
  assert corruptions.subsample(records + [("image-10", 10)], 3) == chosen, (
      "a key that hashes higher than the chosen three leaves them chosen")
  assert corruptions.subsample(records, 0) == records == corruptions.subsample(records, 10)

