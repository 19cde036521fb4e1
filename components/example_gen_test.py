"""ImageDatasetExampleGen on an image folder, run as its executor (no pipeline, no training):
bad files stop it naming each one, or are skipped and listed; the examples are deterministic."""
import glob
import os

import pytest
import tensorflow as tf
from tfx.components.example_gen import utils as example_gen_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.types import standard_artifacts, standard_component_specs
from tfx.utils import proto_utils

from components import example_gen, image_folder, image_sources
from test_support import image_folders
from trainer_module.features import EXAMPLE_KEY, LABEL_KEY


EVAL_FRACTION, TEST_FRACTION = 0.1, 0.3  # Unequal, so that swapping the two shows.


def _exec_properties(image_dir: str, skip_bad_images: bool, source: str = "image_dir") -> dict:
  component = example_gen.ImageDatasetExampleGen(
      source=source, eval_fraction=EVAL_FRACTION, test_fraction=TEST_FRACTION,
      image_dir=image_dir if source == "image_dir" else None, skip_bad_images=skip_bad_images)
  return {name: proto_utils.proto_to_json(value) if hasattr(value, "DESCRIPTOR") else value
          for name, value in component.exec_properties.items() if value is not None}


def run_example_gen(image_dir: str, output_uri: str, skip_bad_images: bool,
                    source: str = "image_dir"):
  """The executor's Do, as the pipeline's ExampleGen step runs it; returns its Examples."""
  properties = _exec_properties(image_dir, skip_bad_images, source)
  examples = standard_artifacts.Examples()
  examples.uri = output_uri
  executor = example_gen._Executor(base_beam_executor.BaseBeamExecutor.Context(
      beam_pipeline_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"]))
  executor.Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, properties)
  return examples


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
  for split in image_sources.SPLITS:  # Each split as its fractions, in their order, give it.
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
