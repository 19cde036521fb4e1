"""Dated folders of labelled photos through the tiny pipeline to a pushed model that answers a
camera's JPEG with a class name (docs/pipeline.md, "Data" and "New data every day"): the newest
day's splits, and the day before's train split with them (--train_spans=2)."""
import glob
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tfx.components.example_gen import utils as example_gen_utils

from components import image_folder, image_sources
from components.evaluation_set import read_evaluation_set
from configs.flags import over_defaults
from local_runner.run_record import RunRecord
from pipeline.config import from_flags
from reporting.render import escape_markdown
from test_support import image_folders
from test_support.tiny_config import SMALL_MODEL
from tests.conftest import run_pipeline
from trainer_module.class_names import read_class_names

CLASSES = ["blue sky", "grass", "red_car"]
NOT_ASCII = "café 猫.jpg"  # Its key's hash puts it in the test split.
OLDER, NEWEST = "2026-11-30", "2026-12-01"  # The day before's photos, and the newest day's.
PER_CLASS = {OLDER: 20, NEWEST: 100}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """One pipeline run over two days of photos (--train_spans=2): the newest day's 300 images of
  mixed formats, sizes and modes, a test image whose name is not ASCII and two bad files, and
  60 images of the day before; an empty folder of the next day is not there yet."""
  root = tmp_path_factory.mktemp("photos")
  written = {date: image_folders.write_dated_spans(str(root), PER_CLASS[date], (date,))[date]
             for date in PER_CLASS}
  images = root / NEWEST
  (images / "grass" / NOT_ASCII).write_bytes(image_folders.jpeg(
      colour=image_folders.CLASS_COLOURS["grass"]))
  (images / "grass" / "scan.jpg").write_bytes(image_folders.jpeg()[:2000])
  (images / "red_car" / "notes.txt").write_text("not an image")
  output = tmp_path_factory.mktemp("outputs")
  pattern = str(root / image_folders.DATE_PATTERN)
  flags = [f"--output_dir={output}", "--dataset=image_dir", f"--image_dir={pattern}",
           "--train_spans=2", "--skip_bad_images=true", *over_defaults(SMALL_MODEL, [
               "--train_epochs=40",  # 210 training images: 3 steps an epoch.
               "--min_eval_examples=30",  # The key hash holds out 49 of the 300 for eval.
               "--corruptions=gaussian_noise,defocus_blur"])]
  process = run_pipeline(*flags)
  assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
  assert "pushed model:    /" in process.stdout, process.stdout[-3000:]
  return process, from_flags(flags), str(images), written


def _pushed(config):
  versions = sorted(os.listdir(config.runner.serving_model_dir))
  assert len(versions) == 1
  return os.path.join(config.runner.serving_model_dir, versions[0])


@pytest.mark.e2e
def test_the_class_folders_become_the_schemas_classes(run):
  _, config, _, _ = run
  schemas = glob.glob(os.path.join(config.runner.pipeline_root, "ClassSchemaGen", "schema", "*",
                                    "schema.pbtxt"))
  assert len(schemas) == 1
  assert read_class_names(schemas[0]) == tuple(CLASSES)


@pytest.mark.e2e
def test_the_served_model_answers_a_camera_jpeg_as_its_ingested_png_with_the_class_name(run):
  _, config, _, _ = run
  served = tf.saved_model.load(_pushed(config))
  photos = [image_folders.jpeg((480, 360), colour, seed=1000 + i)
            for i, colour in enumerate(image_folders.CLASS_COLOURS[name] for name in CLASSES)]
  pngs = [image_sources.encode_png(image_folder.model_input(photo)) for photo in photos]
  from_photos = served.signatures["serving_images"](images=tf.constant(photos))
  from_pngs = served.signatures["serving_images"](images=tf.constant(pngs))
  np.testing.assert_array_equal(from_photos["class_names"], from_pngs["class_names"])
  np.testing.assert_allclose(from_photos["probabilities"], from_pngs["probabilities"],
                             rtol=1e-6)
  assert [name.decode() for name in from_photos["class_names"].numpy()] == CLASSES


@pytest.mark.e2e
def test_the_report_names_the_classes_and_lists_the_skipped_files(run):
  process, config, images, _ = run
  assert "skipped images:  2 bad file(s) or folder(s) left out" in process.stdout
  page = re.search(r"run report: +(\S+)", process.stdout).group(1)
  report = open(os.path.join(os.path.dirname(page), "report.md")).read()  # Beside the page.
  for index, name in enumerate(CLASSES):
    assert f"| {escape_markdown(name)} ({index}) | " in report
  # The report read the evaluation set, whose test images include one named in UTF-8.
  evaluation = RunRecord(config).latest_output("evaluation_set")
  assert f"{NEWEST}/grass/{NOT_ASCII}" in read_evaluation_set(evaluation.uri).source_keys
  assert "## Skipped input files" in report
  assert f"| `{images}/grass/scan.jpg` | cannot be decoded as JPEG" in report
  assert f"| `{images}/red_car/notes.txt` | not an image" in report


@pytest.mark.e2e
def test_the_newest_day_is_read_with_the_day_befores_train_split_and_recorded(run):
  process, config, images, written = run
  examples = RunRecord(config).latest_output("examples")
  newest = example_gen_utils.date_to_span_number(2026, 12, 1)
  assert examples.custom_properties["span"].int_value == newest
  # Each day's train split as its keys' hashes give it (the bad files are the newest day's
  # eval or test images, or not images at all), counted by ExampleGen.
  train = {date: sum(image_sources.split_for_key(relative, config.data.eval_fraction,
                                                  config.data.test_fraction) == "train"
                     for relative in files) for date, files in written.items()}
  window = json.loads(examples.custom_properties["train_window"].string_value)
  assert [(entry["span"], entry["folder"]) for entry in window] == [
      (newest, images), (newest - 1, os.path.join(os.path.dirname(images), OLDER))]
  assert [entry["train_examples"] for entry in window] == [train[NEWEST], train[OLDER]]
  train_keys = _split_keys(examples.uri, "train")
  assert sum(key.startswith(f"{OLDER}/") for key in train_keys) == train[OLDER]
  assert sum(key.startswith(f"{NEWEST}/") for key in train_keys) == window[0]["train_examples"]
  for split in ("eval", "test"):  # The gate and the served check judge the newest day alone.
    keys = _split_keys(examples.uri, split)
    assert keys and all(key.startswith(f"{NEWEST}/") for key in keys)
  summary = (f"span {newest} ({images}); train split from 2 spans: {newest} "
             f"({window[0]['train_examples']} examples), {newest - 1} ({train[OLDER]} examples)")
  assert f"data read:       {summary}" in process.stdout
  page = re.search(r"run report: +(\S+)", process.stdout).group(1)
  report = open(os.path.join(os.path.dirname(page), "report.md")).read()
  assert f"data read: {escape_markdown(summary)}" in report


def _split_keys(uri: str, split: str):
  from trainer_module.features import EXAMPLE_KEY
  keys = []
  for path in glob.glob(os.path.join(uri, f"Split-{split}", "*")):
    for record in tf.data.TFRecordDataset(path, compression_type="GZIP").as_numpy_iterator():
      keys.append(tf.train.Example.FromString(record).features.feature[EXAMPLE_KEY]
                  .bytes_list.value[0].decode())
  return keys
