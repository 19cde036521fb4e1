"""ImageDatasetExampleGen on an image folder, run as its executor (no pipeline, no training):
bad files stop it naming each one, or are skipped and listed; the examples are deterministic."""
import glob
import itertools
import os
import threading

import pytest
import tensorflow as tf
from tfx.components.example_gen import utils as example_gen_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.types import standard_artifacts, standard_component_specs
from tfx.proto import example_gen_pb2
from tfx.utils import proto_utils

from components import example_gen, image_folder, image_sources
from components.splits import SPLITS, split_for_key
from pipeline.config import PipelineConfig
from test_support import image_folders
from trainer_module.features import EXAMPLE_KEY, LABEL_KEY


EVAL_FRACTION, TEST_FRACTION = 0.1, 0.3  # Unequal, so that swapping the two shows.
# A small step's Beam arguments as the local pipeline makes them: in memory, and the
# requirements file that stops TFX from building an sdist of itself for each executor
# (tfx/utils/dependency_utils.py, make_beam_dependency_flags).
BEAM_ARGS = PipelineConfig().beam_pipeline_args(examples=1)


def _properties(component) -> dict:
  """A component's exec properties as its driver and executor receive them."""
  return {name: proto_utils.proto_to_json(value) if hasattr(value, "DESCRIPTOR") else value
          for name, value in component.exec_properties.items() if value is not None}


def _component_properties(**options) -> dict:
  """The exec properties of an ImageDatasetExampleGen with `options` (the test fractions)."""
  return _properties(example_gen.ImageDatasetExampleGen(
      eval_fraction=EVAL_FRACTION, test_fraction=TEST_FRACTION, **options))


def _exec_properties(image_dir: str, skip_bad_images: bool, source: str = "image_dir") -> dict:
  return _component_properties(source=source, skip_bad_images=skip_bad_images,
                               image_dir=image_dir if source == "image_dir" else None)


def _run_executor(properties: dict, output_uri: str, executor_class=example_gen._Executor):
  """The executor's Do, as the pipeline's ExampleGen step runs it; returns its Examples."""
  examples = standard_artifacts.Examples()
  examples.uri = output_uri
  executor = executor_class(base_beam_executor.BaseBeamExecutor.Context(
      beam_pipeline_args=BEAM_ARGS))
  executor.Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, properties)
  return examples


def run_example_gen(image_dir: str, output_uri: str, skip_bad_images: bool,
                    source: str = "image_dir"):
  return _run_executor(_exec_properties(image_dir, skip_bad_images, source), output_uri)


def _examples(uri: str) -> dict:
  """{split: sorted serialized examples}."""
  result = {}
  for split_dir in sorted(glob.glob(os.path.join(uri, "Split-*"))):
    records = []
    for path in glob.glob(os.path.join(split_dir, "*")):
      records += list(tf.data.TFRecordDataset(path, compression_type="GZIP").as_numpy_iterator())
    result[os.path.basename(split_dir)] = sorted(records)
  return result


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  """A good folder of three classes, plus one bad file or folder of each kind: bad contents,
  names that are not UTF-8, broken links and links around and out of the folder (and one link
  to an image nothing else reads, which is read)."""
  root = tmp_path_factory.mktemp("images")
  image_folders.write_image_folder(str(root), per_class=12)
  photo = image_folders.jpeg()
  bad = {"grass/empty.jpg": b"", "grass/notes.txt": b"not an image",
         "red_car/truncated.jpg": photo[:len(photo) // 2],
         "red_car/bomb.png": image_folders.png_declaring(9000, 9000)}
  for relative, data in bad.items():
    (root / relative).write_bytes(data)
  (root / "empty_class").mkdir()
  named = {**image_folders.add_names_not_utf8(str(root)),
           **image_folders.add_broken_links(str(root)),
           **image_folders.add_links_around(str(root), str(tmp_path_factory.mktemp("other")))[0]}
  expected = sorted([str(root / relative) for relative in bad] + [str(root / "empty_class")] +
                    list(named))
  return str(root), expected, named


def test_bad_files_stop_example_gen_naming_each_path_and_reason(folder, tmp_path):
  root, bad_paths, named = folder
  driver = example_gen._Driver(None).resolve_exec_properties(
      _exec_properties(root, False), None, None)
  assert driver[example_gen_utils.FINGERPRINT_PROPERTY_NAME]  # Any name, no link followed.
  with pytest.raises(image_folder.ImageFolderError) as raised:
    run_example_gen(root, str(tmp_path), skip_bad_images=False)
  message = str(raised.value)
  assert message.startswith(f"{len(bad_paths)} bad file(s) or folder(s) in image_dir {root}; "
                            "fix or remove them, or pass --skip_bad_images=true")
  for path, reason in named.items():
    assert f"  - {path}: {reason}" in message
  for line in [f"{root}/grass/empty.jpg: empty file (0 bytes)",
               f"{root}/grass/notes.txt: not an image (expected JPEG, PNG, GIF, BMP)",
               f"{root}/red_car/truncated.jpg: cannot be decoded as JPEG (truncated or "
               "corrupted?)",
               f"{root}/red_car/bomb.png: declares 9000x9000 pixels, more than 40,000,000; "
               "not decoded",
               f"{root}/empty_class: empty class folder: it holds no image files"]:
    assert f"  - {line}" in message


@pytest.fixture(scope="module")
def skipped_runs(folder, tmp_path_factory):
  root, _, _ = folder
  return [run_example_gen(root, str(tmp_path_factory.mktemp(f"run{i}")), skip_bad_images=True)
          for i in range(2)]


def test_with_skip_bad_images_the_bad_files_are_left_out_and_listed(folder, skipped_runs):
  root, bad_paths, _ = folder
  examples = skipped_runs[0]
  assert [path for path, _ in example_gen.read_skipped_files(examples.uri)] == bad_paths
  assert example_gen.read_class_names(examples.uri) == ["blue sky", "grass", "red_car"]
  parsed = [tf.train.Example.FromString(record)
            for records in _examples(examples.uri).values() for record in records]
  assert len(parsed) == 37  # 3 classes x 12 good images, one through a link; no bad one.
  labels = {example.features.feature[EXAMPLE_KEY].bytes_list.value[0].decode():
            example.features.feature[LABEL_KEY].int64_list.value[0] for example in parsed}
  assert labels["grass/0000.jpg"] == 1 and labels["red_car/more/0009.png"] == 2
  assert labels["red_car/kept.jpg"] == 2


def test_two_runs_over_the_same_folder_write_identical_examples(skipped_runs):
  first, second = (_examples(run.uri) for run in skipped_runs)
  assert set(first) == {"Split-train", "Split-eval", "Split-test"}
  assert first == second


def test_a_worker_reads_its_batch_of_files_at_once_and_keeps_their_order(monkeypatch):
  """An object store answers each read after tens of milliseconds: READ_THREADS reads wait
  together (each read below returns only once that many are waiting), and each result stays
  with its file."""
  together = threading.Barrier(example_gen.READ_THREADS, timeout=30)

  def read_when_all_wait(folder, key, label):
    together.wait()  # Raises BrokenBarrierError if fewer reads ever wait at once.
    return (key, b"png of " + key.encode(), label), None

  monkeypatch.setattr(image_folder, "read_image", read_when_all_wait)
  listed = [("s3://b/photos", f"cat/{i}.png", i % 3, f"2026-12-01/cat/{i}.png")
            for i in range(2 * example_gen.READ_THREADS)]
  assert example_gen._read_batch(listed) == [((shown, b"png of " + key.encode(), label), None)
                                             for _, key, label, shown in listed]


def test_the_driver_fingerprints_the_folder_so_that_a_changed_folder_misses_the_cache(tmp_path):
  """The launcher computes the cache key from the exec properties the driver returns
  (tfx/orchestration/portable/launcher.py), as for TFX's file-based ExampleGens."""
  image_folders.write_image_folder(str(tmp_path), per_class=2)

  def fingerprint():
    resolved = example_gen._Driver(None).resolve_exec_properties(
        _exec_properties(str(tmp_path), False), None, None)
    return resolved[example_gen_utils.FINGERPRINT_PROPERTY_NAME]

  before = fingerprint()
  assert before and before == fingerprint()
  (tmp_path / "grass" / "new.jpg").write_bytes(image_folders.jpeg())
  assert fingerprint() != before


def test_the_digits_go_through_the_same_executor_and_record_no_folder_files(tmp_path):
  examples = run_example_gen("", str(tmp_path), False, source="digits")
  written = _examples(examples.uri)
  assert sum(len(records) for records in written.values()) == 1797
  for split in SPLITS:  # Each split as its fractions, in their order, give it.
    expected = image_sources.digits_records(split, EVAL_FRACTION, TEST_FRACTION)
    assert len(written[f"Split-{split}"]) == len(list(expected)), split
  assert example_gen.read_class_names(examples.uri) is None  # The config names them.
  assert example_gen.read_skipped_files(examples.uri) == []


def test_cifar10_is_prepared_once_in_the_step_before_its_workers_read_it(tmp_path, monkeypatch):
  import tensorflow_datasets as tfds
  prepared = []
  monkeypatch.setattr(image_sources, "prepare_tfds",
                      lambda name, data_dir=None: prepared.append((name, data_dir)))
  with tfds.testing.mock_data(num_examples=12):
    examples = run_example_gen("", str(tmp_path / "ok"), False, source="cifar10")
  assert prepared == [("cifar10", None)]
  written = _examples(examples.uri)
  assert len(written["Split-test"]) == 12  # tfds' test split; train splits into train and eval
  assert len(written["Split-train"]) + len(written["Split-eval"]) == 12

  def unavailable(name, data_dir=None):
    raise image_sources.TfdsUnavailable(f"tensorflow-datasets could not download {name}")

  monkeypatch.setattr(image_sources, "prepare_tfds", unavailable)
  with pytest.raises(image_sources.TfdsUnavailable, match="could not download cifar10"):
    run_example_gen("", str(tmp_path / "offline"), False, source="cifar10")
  assert not glob.glob(str(tmp_path / "offline" / "Split-*")), "no split is written"


# Span patterns: dated image folders, and TFRecord folders by {SPAN}.


def _span_exec_properties(pattern: str, train_spans: int, span: str = "") -> dict:
  return _component_properties(source="image_dir", image_dir=pattern, span=span,
                               train_spans=train_spans)


def _keys(uri: str) -> dict:
  """{split: sorted example keys}."""
  return {split: sorted(tf.train.Example.FromString(record).features.feature[EXAMPLE_KEY]
                        .bytes_list.value[0].decode() for record in records)
          for split, records in _examples(uri).items()}


@pytest.fixture(scope="module")
def dated(tmp_path_factory):
  root = tmp_path_factory.mktemp("dated")
  written = image_folders.write_dated_spans(str(root), per_class=8,
                                            dates=image_folders.DATES[:3])
  return str(root), written


def _expected_split(relatives, split):
  return sorted(relative for relative in relatives
                if split_for_key(relative, EVAL_FRACTION, TEST_FRACTION) == split)


def test_a_dated_folder_reads_the_newest_days_splits_and_the_windows_train_splits(dated,
                                                                                tmp_path):
  root, written = dated
  pattern = os.path.join(root, image_folders.DATE_PATTERN)
  resolved = example_gen._Driver(None).resolve_exec_properties(
      _span_exec_properties(pattern, train_spans=2), None, None)
  newest = example_gen_utils.date_to_span_number(2026, 12, 1)
  assert resolved[example_gen_utils.SPAN_PROPERTY_NAME] == newest
  assert resolved[example_gen_utils.VERSION_PROPERTY_NAME] is None
  assert f"{root}/2026-11-30: image_dir:" in resolved[example_gen_utils.FINGERPRINT_PROPERTY_NAME]
  examples = _run_executor(resolved, str(tmp_path))
  keys = _keys(examples.uri)
  # Eval and test: the newest day's alone; train: its train split and the day before's.
  for split in ("eval", "test"):
    assert keys[f"Split-{split}"] == [f"2026-12-01/{r}" for r in _expected_split(
        written["2026-12-01"], split)]
  day_train = {date: _expected_split(written[date], "train") for date in written}
  assert keys["Split-train"] == sorted(
      [f"2026-12-01/{r}" for r in day_train["2026-12-01"]] +
      [f"2026-11-30/{r}" for r in day_train["2026-11-30"]])
  assert example_gen.read_train_window(examples) == [
      {"span": newest, "version": None, "folder": f"{root}/2026-12-01",
       "train_examples": len(day_train["2026-12-01"])},
      {"span": newest - 1, "version": None, "folder": f"{root}/2026-11-30",
       "train_examples": len(day_train["2026-11-30"])}]
  assert examples.get_int_custom_property("span") == newest
  assert example_gen.read_class_names(examples.uri) == ["blue sky", "grass", "red_car"]


def test_a_requested_day_is_read_without_a_driver_as_with_one(dated, tmp_path):
  """Vertex runs no driver for this ExampleGen: the executor resolves the pattern itself."""
  root, written = dated
  pattern = os.path.join(root, image_folders.DATE_PATTERN)
  examples = _run_executor(_span_exec_properties(pattern, train_spans=3, span="2026-11-30"),
                           str(tmp_path))
  keys = _keys(examples.uri)
  assert keys["Split-eval"] == [f"2026-11-30/{r}" for r in _expected_split(
      written["2026-11-30"], "eval")]
  window = example_gen.read_train_window(examples)
  assert [entry["folder"] for entry in window] == [f"{root}/2026-11-30", f"{root}/2026-11-29"]
  assert sum(entry["train_examples"] for entry in window) == len(keys["Split-train"])
  assert examples.get_int_custom_property("span") == example_gen_utils.date_to_span_number(
      2026, 11, 30)


def test_an_older_span_with_a_class_the_newest_lacks_is_refused(tmp_path):
  image_folders.write_image_folder(str(tmp_path / "1"), per_class=2)
  image_folders.write_image_folder(str(tmp_path / "2"), per_class=2, classes={
      name: colour for name, colour in image_folders.CLASS_COLOURS.items() if name != "grass"})
  with pytest.raises(image_folder.ImageFolderError,
                     match=r"span folder .*/1 has class folder\(s\) \['grass'\] that the newest "
                     r"span .*/2 lacks"):
    _run_executor(_span_exec_properties(str(tmp_path / "{SPAN}"), train_spans=2),
                  str(tmp_path / "out"))


def test_an_empty_newest_day_is_refused_naming_the_pattern_and_the_folder(dated, tmp_path):
  root, _ = dated
  empty = tmp_path / "days"
  image_folders.write_image_folder(str(empty / "2026-11-30"), per_class=2)
  (empty / "2026-12-01").mkdir()
  pattern = str(empty / image_folders.DATE_PATTERN)
  with pytest.raises(ValueError, match=f"the newest 2026-12-01 .* of the pattern {pattern} is "
                     f"empty: {empty}/2026-12-01 holds no files"):
    example_gen._Driver(None).resolve_exec_properties(
        _span_exec_properties(pattern, train_spans=1), None, None)


def test_a_tfrecord_dir_of_span_folders_reads_the_newest_span_or_the_requested_one(tmp_path):
  from test_support import tfrecord_inputs
  for span, limit in ((1, 5), (2, 7)):
    tfrecord_inputs.write_digits_tfrecord_dir(str(tmp_path / "data" / f"span-{span}"), limit)
  for requested, expected in (("", 2), ("1", 1)):
    component = example_gen.TFRecordExampleGen(
        input_base=str(tmp_path / "data"), span=requested,
        input_config=example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name=s, pattern=f"span-{{SPAN}}/{s}/*")
            for s in ("train", "eval")]))
    properties = _properties(component)
    resolved = example_gen.driver_for(properties)(None).resolve_exec_properties(
        properties, None, None)
    assert resolved[example_gen_utils.SPAN_PROPERTY_NAME] == expected
    examples = _run_executor(resolved, str(tmp_path / f"out-{requested or 'newest'}"),
                             component.executor_spec.executor_class)
    written = _examples(examples.uri)
    assert len(written["Split-train"]) == (7 if expected == 2 else 5)
  with pytest.raises(ValueError, match=r"span 3 of the pattern .*/data/span-\{SPAN\} is "
                     r"missing: no folder .*/data/span-3"):
    component = example_gen.TFRecordExampleGen(
        input_base=str(tmp_path / "data"), span="3", input_config=example_gen_pb2.Input(
            splits=[example_gen_pb2.Input.Split(name="train", pattern="span-{SPAN}/train/*")]))
    example_gen._FileDriver(None).resolve_exec_properties(_properties(component), None, None)


def test_a_tfrecord_window_adds_the_older_spans_train_records_with_their_keys_prefixed(
    tmp_path):
  from test_support import tfrecord_inputs
  for span, limit in ((1, 4), (2, 6), (3, 5)):
    tfrecord_inputs.write_digits_tfrecord_dir(str(tmp_path / "data" / f"span-{span}"), limit)
  component = example_gen.TFRecordExampleGen(
      input_base=str(tmp_path / "data"), span_pattern="span-{SPAN}", train_spans=2,
      input_config=example_gen_pb2.Input(splits=[
          example_gen_pb2.Input.Split(name=s, pattern=f"span-{{SPAN}}/{s}/*")
          for s in ("train", "eval")]))
  resolved = example_gen._FileDriver(None).resolve_exec_properties(_properties(component), None,
                                                                   None)
  fingerprint = resolved[example_gen_utils.FINGERPRINT_PROPERTY_NAME]
  assert f"train of {tmp_path}/data/span-2" in fingerprint  # The older span's files too.
  examples = _run_executor(resolved, str(tmp_path / "out"), component.executor_spec.executor_class)
  keys = _keys(examples.uri)
  first_six = [key for key, _, _ in itertools.islice(
      image_sources.digits_records("train", 0.15, 0.15), 6)]
  newest, older = first_six[:5], first_six
  assert keys["Split-train"] == sorted(newest + [f"span-2/{key}" for key in older])
  assert len(keys["Split-eval"]) == 5  # The newest span's alone.
  assert example_gen.read_train_window(examples) == [
      {"span": 3, "version": None, "folder": str(tmp_path / "data" / "span-3"),
       "train_examples": 5},
      {"span": 2, "version": None, "folder": str(tmp_path / "data" / "span-2"),
       "train_examples": 6}]


def test_the_bad_file_list_of_a_split_is_one_file_even_when_empty(tmp_path):
  """Written with fileio, not Beam's text sink, whose empty file S3 refuses."""
  from components import example_gen as example_gen_module
  path = str(tmp_path / "bad_files" / "eval")
  example_gen_module._write_lines([], path)  # pylint: disable=protected-access
  assert open(path).read() == ""
  example_gen_module._write_lines(['["b"]', '["a"]'], path)  # pylint: disable=protected-access
  assert open(path).read() == '["a"]\n["b"]\n'
