"""The Evaluator's input: clean eval/test copies and corruption x severity slices of equal size."""
import collections
import hashlib
import json
import logging
import os
import shutil
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from components import evaluation_set, image_sources
from test_support.tfrecord_inputs import first_digit_records
from trainer_module import reference_corruptions


def _example_gen_output(path, per_split=12, splits=("train", "eval", "test")):
  """Examples laid out as ExampleGen writes them (Split-<name>/*.gz)."""
  for split in splits:
    os.makedirs(os.path.join(path, f"Split-{split}"))
    records = first_digit_records(split, per_split)
    with tf.io.TFRecordWriter(os.path.join(path, f"Split-{split}", "data.gz"),
                              options="GZIP") as writer:
      for key, png, label in reversed(records):  # Order must not matter.
        writer.write(image_sources.make_example(key, png, label).SerializeToString())
  return str(path)


def _read(uri, split):
  files = tf.io.gfile.glob(os.path.join(uri, f"Split-{split}", "*"))
  return [tf.train.Example.FromString(r.numpy()).features.feature
          for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def test_generated_set_has_every_corruption_and_severity_with_equal_counts(tmp_path):
  examples = _example_gen_output(tmp_path / "examples")
  out = str(tmp_path / "out")
  counts = evaluation_set.write_evaluation_set(
      examples, ["train", "eval", "test"], out, "generated", ["contrast", "gaussian_noise"], 5)
  assert counts == {"eval": 12, "test": 12, "corrupted": 2 * 5 * 5}
  for split in ("eval", "test"):
    for feature in _read(out, split):
      assert feature["eval_set"].bytes_list.value == [split.encode()]
      assert not {"corruption", "severity", "corruption_family"} & set(feature)
      assert feature["source_image"].bytes_list.value == feature["key"].bytes_list.value
  corrupted = _read(out, "corrupted")
  slices = collections.Counter((f["corruption"].bytes_list.value[0].decode(),
                                f["severity"].int64_list.value[0]) for f in corrupted)
  assert slices == {(c, s): 5 for c in ("contrast", "gaussian_noise") for s in range(1, 6)}
  assert {(f["corruption"].bytes_list.value[0], f["corruption_family"].bytes_list.value[0])
          for f in corrupted} == {(b"contrast", b"digital"), (b"gaussian_noise", b"noise")}
  # The same five test images in every slice, with their labels.
  test_labels = {f["key"].bytes_list.value[0].decode(): f["label"].int64_list.value[0]
                 for f in _read(out, "test")}
  for feature in corrupted:  # Keyed <source image>/<corruption>_<severity>, source named.
    source_key = feature["source_image"].bytes_list.value[0].decode()
    corruption = feature["corruption"].bytes_list.value[0].decode()
    assert feature["key"].bytes_list.value[0].decode() == \
        f"{source_key}/{corruption}_{feature['severity'].int64_list.value[0]}"
    assert feature["label"].int64_list.value[0] == test_labels[source_key]
    assert image_sources.decode_png(feature["image"].bytes_list.value[0]).shape == (32, 32, 3)
  assert len({f["key"].bytes_list.value[0].split(b"/")[0] for f in corrupted}) == 5

  again = str(tmp_path / "again")
  evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"], again, "generated",
                                      ["contrast", "gaussian_noise"], 5)
  for split in ("eval", "test", "corrupted"):
    assert [f["image"].bytes_list.value[0] for f in _read(out, split)] == \
        [f["image"].bytes_list.value[0] for f in _read(again, split)], "deterministic"


def test_without_a_test_split_the_generated_set_is_refused_before_writing(tmp_path):
  examples = _example_gen_output(tmp_path / "examples", splits=("train", "eval"))
  out = tmp_path / "out"
  with pytest.raises(ValueError, match="corrupts the test split"):
    evaluation_set.write_evaluation_set(examples, ["train", "eval"], str(out), "generated",
                                        ["contrast"], 0)
  assert not out.exists()
  counts = evaluation_set.write_evaluation_set(examples, ["train", "eval"], str(out),
                                               "generated", [], 0)
  assert counts == {"eval": 12, "test": 0, "corrupted": 0}


def test_a_corruption_that_cannot_run_here_is_refused_before_writing(tmp_path, monkeypatch):
  monkeypatch.setattr(reference_corruptions, "magick_wand", lambda: None)
  examples = _example_gen_output(tmp_path / "examples", per_split=1)
  out = tmp_path / "out"
  with pytest.raises(ValueError, match="motion_blur needs ImageMagick"):
    evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"], str(out),
                                        "generated", ["contrast", "motion_blur"], 0)
  assert not out.exists()


@pytest.mark.parametrize("source, names, message", [
    ("imagenet_c", ["contrast"], "Unknown robustness source"),
    ("generated", ["snow", "glitter"], r"Unknown corruption\(s\) \['glitter'\]"),
    ("cifar10_corrupted", ["sparkles"], r"Unknown corruption\(s\) \['sparkles'\]"),
])
def test_unknown_sources_and_corruptions_are_refused(tmp_path, source, names, message):
  examples = _example_gen_output(tmp_path / "examples", per_split=1)
  with pytest.raises(ValueError, match=message):
    evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"],
                                        str(tmp_path / "out"), source, names, 0)


def test_cifar10_corrupted_from_tensorflow_datasets(tmp_path, monkeypatch):
  """Each config is prepared (downloaded once, or found) before anything is written."""
  import tensorflow_datasets as tfds
  prepared, prepare = [], image_sources.prepare_tfds
  monkeypatch.setattr(image_sources, "prepare_tfds",
                      lambda name, data_dir=None: prepared.append(name) or prepare(name, data_dir))
  examples = _example_gen_output(tmp_path / "examples", per_split=3)
  with tfds.testing.mock_data(num_examples=7):
    counts = evaluation_set.write_evaluation_set(
        examples, ["train", "eval", "test"], str(tmp_path / "out"), "cifar10_corrupted",
        ["frost", "zoom_blur"], 4)
  assert counts["corrupted"] == 2 * 5 * 4
  assert prepared == [f"cifar10_corrupted/{name}_{severity}" for name in ("frost", "zoom_blur")
                      for severity in range(1, 6)]

  def unavailable(name, data_dir=None):
    raise image_sources.TfdsUnavailable(f"tensorflow-datasets could not download {name}")

  monkeypatch.setattr(image_sources, "prepare_tfds", unavailable)
  with pytest.raises(image_sources.TfdsUnavailable, match="download cifar10_corrupted/frost_1"):
    evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"],
                                        str(tmp_path / "offline"), "cifar10_corrupted",
                                        ["frost"], 4)
  assert not (tmp_path / "offline").exists() or not any((tmp_path / "offline").iterdir()), (
      "nothing is written before every config is prepared")
  corrupted = _read(str(tmp_path / "out"), "corrupted")
  slices = collections.Counter((f["corruption"].bytes_list.value[0].decode(),
                                f["severity"].int64_list.value[0]) for f in corrupted)
  assert slices == {(c, s): 4 for c in ("frost", "zoom_blur") for s in range(1, 6)}
  sources = collections.defaultdict(set)  # The same 4 images in every slice, by index.
  for feature in corrupted:
    source = feature["source_image"].bytes_list.value[0].decode()
    sources[(feature["corruption"].bytes_list.value[0], feature["severity"].int64_list.value[0])
            ].add(source)
    assert feature["key"].bytes_list.value[0].decode().startswith(source + "/")
    assert image_sources.decode_png(feature["image"].bytes_list.value[0]).shape == (32, 32, 3)
    assert 0 <= feature["label"].int64_list.value[0] < 10
  assert set(map(frozenset, sources.values())) == {
      frozenset(f"cifar10_corrupted-{index:05d}" for index in range(4))}


def test_the_corrupted_split_made_by_a_pool_of_processes_is_byte_identical(tmp_path):
  examples = _example_gen_output(tmp_path / "examples", per_split=3)
  splits = ["train", "eval", "test"]
  for workers in (1, 2):
    evaluation_set.write_evaluation_set(examples, splits, str(tmp_path / f"w{workers}"),
                                        "generated", ["snow", "contrast"], 2, workers=workers)
  one, two = (_read(str(tmp_path / f"w{workers}"), "corrupted") for workers in (1, 2))
  assert [f["key"].bytes_list.value for f in one] == [f["key"].bytes_list.value for f in two]
  assert [f["image"].bytes_list.value for f in one] == [f["image"].bytes_list.value for f in two]


def test_a_negative_worker_count_is_refused_before_writing(tmp_path):
  examples = _example_gen_output(tmp_path / "examples", per_split=1)
  out = tmp_path / "out"
  with pytest.raises(ValueError, match="workers must be >= 0"):
    evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"], str(out),
                                        "generated", ["contrast"], 0, workers=-1)
  assert not out.exists()


def test_cached_slices_are_read_back_byte_identical_and_new_images_miss(tmp_path, monkeypatch):
  """A second run with the same test images reads every slice from the cache (the corruption
  code is not called) and writes the same bytes; other images make a new entry."""
  examples = _example_gen_output(tmp_path / "examples", per_split=3)
  splits, cache = ["train", "eval", "test"], str(tmp_path / "cache")
  evaluation_set.write_evaluation_set(examples, splits, str(tmp_path / "fresh"), "generated",
                                      ["brightness", "contrast"], 0, cache_dir=cache)
  assert len(_cache_entries(cache)) == 2 * 5

  def refuse(*_):
    raise AssertionError("a cached slice was corrupted again")

  monkeypatch.setattr(evaluation_set.corruptions, "corrupt_all", refuse)
  evaluation_set.write_evaluation_set(examples, splits, str(tmp_path / "cached"), "generated",
                                      ["brightness", "contrast"], 0, cache_dir=cache)
  fresh, cached = (_read(str(tmp_path / name), "corrupted") for name in ("fresh", "cached"))
  assert [f["key"].bytes_list.value for f in fresh] == [f["key"].bytes_list.value for f in cached]
  assert [f["image"].bytes_list.value for f in fresh] == \
      [f["image"].bytes_list.value for f in cached]
  with pytest.raises(AssertionError, match="corrupted again"):
    evaluation_set.write_evaluation_set(examples, splits, str(tmp_path / "fewer"), "generated",
                                        ["contrast"], 2, cache_dir=cache)


_CORRUPTION_SOURCE = '''"""Makes corrupted pixels."""
import numpy as np


def brightness(image, severity):
  """Lifts every pixel."""
  lift = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # Hendrycks & Dietterich's values.
  return np.clip(image + lift, 0, 1)
'''


def test_the_cache_key_changes_with_the_code_and_not_with_its_comments_or_layout():
  """A comment-only tidy of reference_corruptions.py used to remake every cached slice."""
  key = evaluation_set.source_fingerprint(_CORRUPTION_SOURCE)
  reworded = (_CORRUPTION_SOURCE.replace("Makes corrupted pixels.", "The corruptions.")
              .replace("Lifts every pixel.", "Adds the same light to every pixel.\n\n  Clipped.")
              .replace("  # Hendrycks & Dietterich's values.", "")
              .replace("0.3, 0.4", "0.3,\n          0.4") + "# trailing note\n")
  assert evaluation_set.source_fingerprint(reworded) == key
  for changed in (_CORRUPTION_SOURCE.replace("0.5]", "0.6]"),
                  _CORRUPTION_SOURCE.replace("0, 1)", "0, 255)"),
                  _CORRUPTION_SOURCE.replace("def brightness", "def lighten")):
    assert evaluation_set.source_fingerprint(changed) != key
  with open(reference_corruptions.__file__, encoding="utf-8") as source:
    module = source.read()
  assert (evaluation_set.source_fingerprint(module + "\n# A comment.\n")
          == evaluation_set.source_fingerprint(module))


def test_an_unwritable_cache_is_warned_about_and_the_set_still_written(tmp_path, caplog):
  examples = _example_gen_output(tmp_path / "examples", per_split=2)
  blocked = tmp_path / "blocked"
  blocked.write_text("a file where the cache directory should be")
  counts = evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"],
                                               str(tmp_path / "out"), "generated", ["contrast"],
                                               0, cache_dir=str(blocked / "cache"))
  assert counts["corrupted"] == 2 * 5
  assert "Could not cache slice contrast_1" in caplog.text


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
  monkeypatch.setenv("CORRUPTION_CACHE_DIR", str(tmp_path / "here"))
  assert evaluation_set.corruption_cache_dir() == str(tmp_path / "here")
  monkeypatch.delenv("CORRUPTION_CACHE_DIR")
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert evaluation_set.corruption_cache_dir().startswith(str(tmp_path / "xdg"))


def test_read_back_each_example_names_the_image_it_was_made_from_even_when_keys_hold_slashes(
    tmp_path):
  """An image folder's keys are paths: the source of `test/cat/7.jpg/fog_3` is
  `test/cat/7.jpg`, as its source_image feature says, not `test`."""
  png = image_sources.encode_png(tf.zeros([32, 32, 3], tf.uint8).numpy())
  examples = {evaluation_set.EVAL: [evaluation_set.make_evaluation_example(
                  "eval/dog/1.jpg", png, 1, evaluation_set.EVAL)],
              evaluation_set.TEST: [evaluation_set.make_evaluation_example(
                  "test/cat/7.jpg", png, 3, evaluation_set.TEST)],
              evaluation_set.CORRUPTED: [evaluation_set.make_evaluation_example(
                  source, png, 3, evaluation_set.CORRUPTED, "fog", severity)
                  for source in ("test/cat/7.jpg", "test/cat/8.jpg") for severity in (1, 3)]}
  for split, split_examples in examples.items():
    evaluation_set._write(str(tmp_path), split, split_examples)
  read = evaluation_set.read_evaluation_set(str(tmp_path))
  written = {split: [f["source_image"].bytes_list.value[0].decode() for f in _read(
      str(tmp_path), split)] for split in examples}
  for split, sources in written.items():
    assert sorted(read.source_keys[read.eval_sets == split]) == sorted(sources)
  assert sorted(read.source_keys[read.eval_sets == evaluation_set.CORRUPTED]) == [
      "test/cat/7.jpg", "test/cat/7.jpg", "test/cat/8.jpg", "test/cat/8.jpg"]
  assert sorted(read.slices[read.eval_sets == evaluation_set.CORRUPTED]) == [
      "fog_1", "fog_1", "fog_3", "fog_3"]


def test_the_set_is_made_again_when_the_code_writing_its_examples_changes(tmp_path, monkeypatch):
  """TFX's cache key covers EvaluationSetGen's parameters, not its code: the pipeline passes
  this fingerprint of the three modules that write the examples, so a changed feature (say,
  SOURCE_IMAGE_KEY added) remakes the set; a comment does not."""
  copies = {}
  for module in (evaluation_set, image_sources, reference_corruptions):
    copies[module] = tmp_path / os.path.basename(module.__file__)
    with open(module.__file__, encoding="utf-8") as source:
      copies[module].write_text(source.read())
    monkeypatch.setattr(module, "__file__", str(copies[module]))
  key = evaluation_set.examples_code_fingerprint()
  assert key == evaluation_set.examples_code_fingerprint()
  for module, edit, same in [
      (image_sources, lambda text: text + "\n# A note.\n", True),
      (evaluation_set, lambda text: text.replace('SOURCE_IMAGE_KEY = "source_image"',
                                                 'SOURCE_IMAGE_KEY = "source_key"'), False),
      (image_sources, lambda text: text.replace("def make_example(", "def make_example_(", 1)
       .replace("make_example(", "make_example_("), False),
      (reference_corruptions, lambda text: text + "\nEXTRA = 1\n", False)]:
    original = copies[module].read_text()
    assert edit(original) != original
    copies[module].write_text(edit(original))
    assert (evaluation_set.examples_code_fingerprint() == key) is same, module.__name__
    copies[module].write_text(original)


def _cache_entries(cache):
  return sorted(name for name in os.listdir(cache) if name.endswith(".npy"))


def _entry(cache, slice_name):
  [name] = [n for n in _cache_entries(cache) if n.startswith(slice_name + "-")]
  return os.path.join(cache, name)


def _damage(path, how):
  """What a disk, a killed writer, an older version or another program leaves in an entry."""
  images = np.load(path)
  with open(path, "rb") as f:
    data = f.read()

  def save_with_its_checksum(array):  # Only the shape or dtype check can catch these.
    np.save(path, array)
    with open(path, "rb") as f:
      digest = hashlib.sha256(f.read()).hexdigest()
    with open(path + ".sha256", "w") as f:
      f.write(f"{digest}  {os.path.basename(path)}\n")
  if how == "truncated":
    with open(path, "wb") as f:
      f.write(data[:len(data) // 2])
  elif how == "zero bytes":
    open(path, "wb").close()
  elif how == "float64":
    save_with_its_checksum(images.astype(np.float64))
  elif how == "a row short":  # A valid header, one image fewer than the slice has.
    save_with_its_checksum(images[:-1])
  elif how == "zeros":  # The right shape and dtype, the checksum of other bytes.
    np.save(path, np.zeros_like(images))
  elif how == "no checksum":  # Written before checksums were, or its checksum file lost.
    np.save(path, np.zeros_like(images))
    os.remove(path + ".sha256")
  return images


@pytest.fixture(scope="module")
def contrast_set(tmp_path_factory):
  """(examples, a contrast set made from them, the cache that run filled), made once for the
  module: the tests of damaged entries each damage a copy of the cache."""
  root = tmp_path_factory.mktemp("contrast_set")
  examples = _example_gen_output(root / "examples", per_split=3)
  evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"], str(root / "fresh"),
                                      "generated", ["contrast"], 0, cache_dir=str(root / "cache"))
  return examples, str(root / "fresh"), str(root / "cache")


def _cache_copy(contrast_set, tmp_path):
  """The module's examples, its fresh set, and a copy of its cache of this test's own."""
  examples, fresh, cache = contrast_set
  shutil.copytree(cache, tmp_path / "cache")
  return examples, fresh, str(tmp_path / "cache")


@pytest.mark.parametrize("how", ["truncated", "zero bytes", "float64", "a row short", "zeros",
                                 "no checksum"])
def test_a_damaged_cache_entry_is_made_again_with_a_line_naming_it(tmp_path, monkeypatch,
                                                                    caplog, how, contrast_set):
  examples, fresh_set, cache = _cache_copy(contrast_set, tmp_path)
  splits = ["train", "eval", "test"]
  damaged = _entry(cache, "contrast_3")
  _damage(damaged, how)
  made_again = []
  corrupt_all = evaluation_set.corruptions.corrupt_all

  def counting(requests, workers=0):
    made_again.extend((name, severity) for _, name, severity, _ in requests)
    return corrupt_all(requests, workers)
  monkeypatch.setattr(evaluation_set.corruptions, "corrupt_all", counting)
  caplog.set_level(logging.WARNING)
  evaluation_set.write_evaluation_set(examples, splits, str(tmp_path / "again"), "generated",
                                      ["contrast"], 0, cache_dir=cache)
  assert made_again == [("contrast", 3)] * 3  # That slice's three images, and nothing else.
  assert f"Corruption cache entry {damaged} cannot be used" in caplog.text
  fresh, again = _read(fresh_set, "corrupted"), _read(str(tmp_path / "again"), "corrupted")
  assert [f["image"].bytes_list.value for f in fresh] == \
      [f["image"].bytes_list.value for f in again]
  made_again.clear()
  evaluation_set.write_evaluation_set(examples, splits, str(tmp_path / "third"), "generated",
                                      ["contrast"], 0, cache_dir=cache)
  assert made_again == []  # Repaired: read from the cache.


def test_an_entry_damaged_after_its_check_is_made_again_when_read(tmp_path, monkeypatch,
                                                                   caplog, contrast_set):
  examples, fresh_set, cache = _cache_copy(contrast_set, tmp_path)
  splits = ["train", "eval", "test"]
  entry = _entry(cache, "contrast_2")
  is_whole = evaluation_set.cached_slice_is_whole
  checks = []

  def then_damaged(path, shape):  # Another program truncates it between check and read.
    whole = is_whole(path, shape)
    checks.append(path)
    if path == entry and checks.count(path) == 1:
      _damage(path, "truncated")
    return whole
  monkeypatch.setattr(evaluation_set, "cached_slice_is_whole", then_damaged)
  caplog.set_level(logging.WARNING)
  evaluation_set.write_evaluation_set(examples, splits, str(tmp_path / "again"), "generated",
                                      ["contrast"], 0, cache_dir=cache)
  assert f"Corruption cache entry {entry} cannot be used" in caplog.text
  fresh, again = _read(fresh_set, "corrupted"), _read(str(tmp_path / "again"), "corrupted")
  assert [f["image"].bytes_list.value for f in fresh] == \
      [f["image"].bytes_list.value for f in again]
  assert evaluation_set.read_cached_slice(entry, (3, 32, 32, 3)) is not None  # Rewritten.


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)],
                         ids=["umask-022", "umask-027"])
def test_cache_entries_are_whole_and_readable_by_the_group(tmp_path, umask, mode):
  examples = _example_gen_output(tmp_path / "examples", per_split=2)
  cache = str(tmp_path / "cache")
  previous = os.umask(umask)
  try:
    evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"],
                                        str(tmp_path / "out"), "generated", ["contrast"], 0,
                                        cache_dir=cache)
  finally:
    os.umask(previous)
  names = sorted(os.listdir(cache))
  for name in names:
    assert os.stat(os.path.join(cache, name)).st_mode & 0o777 == mode, name
  assert len(_cache_entries(cache)) == 5 and len(names) == 10  # Each with its checksum.
  assert all(name.endswith((".npy", ".npy.sha256")) for name in names)  # No temporary left.


def test_a_write_that_fails_midway_leaves_no_entry(tmp_path, monkeypatch):
  examples = _example_gen_output(tmp_path / "examples", per_split=2)
  cache = str(tmp_path / "cache")

  def disk_full(file, array, **_):
    file.write(b"\x93NUMPY half an entry")
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(evaluation_set.np, "save", disk_full)
  evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"],
                                      str(tmp_path / "out"), "generated", ["contrast"], 0,
                                      cache_dir=cache)
  assert os.listdir(cache) == []


def test_another_user_of_the_group_reads_the_cache(tmp_path):
  """A shared cache (CORRUPTION_CACHE_DIR) is written by one user and read by another of its
  group: here a child process as `nobody` in the group of the files' owner. An entry it may not
  read (0600, as entries were once written) is made again, not a failed step."""
  if os.geteuid() != 0:
    pytest.skip("needs root to become another user")
  shared = tempfile.mkdtemp()  # pytest's tmp_path is closed to other users.
  os.chmod(shared, 0o755)
  try:
    examples = _example_gen_output(tmp_path / "examples", per_split=2)
    cache = os.path.join(shared, "cache")
    evaluation_set.write_evaluation_set(examples, ["train", "eval", "test"],
                                        str(tmp_path / "out"), "generated", ["contrast"], 0,
                                        cache_dir=cache)
    entry, private = _entry(cache, "contrast_2"), _entry(cache, "contrast_4")
    os.chmod(private, 0o600)
    expected = np.load(entry)
    group = os.stat(entry).st_gid
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # The child: another user in the files' group reads the entry.
      try:
        os.close(read_fd)
        os.setgroups([group])
        os.setgid(group)
        os.setuid(65534)
        images = evaluation_set.read_cached_slice(entry, expected.shape)
        answer = [None if images is None else bool(np.array_equal(images, expected)),
                  evaluation_set.read_cached_slice(private, expected.shape) is None]
        os.write(write_fd, json.dumps(answer).encode())
      finally:
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
      answer = pipe.read()
    os.waitpid(pid, 0)
    assert answer == "[true, true]"  # Read whole; the private one left to be made again.
  finally:
    shutil.rmtree(shared)


def test_keys_that_are_not_ascii_are_read_back_as_written(tmp_path):
  """A photo named `café 猫.jpg` gives a UTF-8 key; reading the set back (the report does, for
  the served distance scores) must not assume ASCII."""
  png = image_sources.encode_png(tf.zeros([32, 32, 3], tf.uint8).numpy())
  key = "test/猫 chat/café 猫.jpg"
  evaluation_set._write(str(tmp_path), evaluation_set.TEST, [
      evaluation_set.make_evaluation_example(key, png, 0, evaluation_set.TEST)])
  evaluation_set._write(str(tmp_path), evaluation_set.CORRUPTED, [
      evaluation_set.make_evaluation_example(key, png, 0, evaluation_set.CORRUPTED, "fog", 2)])
  read = evaluation_set.read_evaluation_set(str(tmp_path))
  assert list(read.source_keys) == [key, key]
  assert list(read.eval_sets) == [evaluation_set.CORRUPTED, evaluation_set.TEST]
  assert list(read.slices) == ["fog_2", ""]
