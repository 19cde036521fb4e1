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
from components.splits import split_for_key
from components.evaluation_set import read_evaluation_set
from configs.flags import over_defaults
from local_runner.run_record import RunRecord
from pipeline.config import from_flags
from reporting.render import escape_markdown
from test_support import image_folders
from test_support.tiny_config import SMALL_MODEL
from tests.conftest import run_pipeline
from trainer_module.class_names import read_class_names
from trainer_module.warm_start import TRAINING_INFO_PATH

CLASSES = ["blue sky", "grass", "red_car"]
NOT_ASCII = "café 猫.jpg"  # Its key's hash puts it in the test split.
OLDER, NEWEST = "2026-11-30", "2026-12-01"  # The day before's photos, and the newest day's.
PER_CLASS = {OLDER: 20, NEWEST: 100}


def _flags(output, pattern, *more, train_spans=2):
  return [f"--output_dir={output}", "--dataset=image_dir", f"--image_dir={pattern}",
          f"--train_spans={train_spans}", "--skip_bad_images=true", *over_defaults(SMALL_MODEL, [
              "--train_epochs=40",  # 210 training images: 3 steps an epoch.
              "--min_eval_examples=30",  # The key hash holds out 49 of the 300 for eval.
              "--corruptions=gaussian_noise,defocus_blur", *more])]


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
  flags = _flags(output, pattern)
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
  train = {date: sum(split_for_key(relative, config.data.eval_fraction,
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


@pytest.mark.e2e
def test_a_schedule_skips_a_day_already_served_refuses_an_older_one_and_trains_a_new_one(
    run, tmp_path):
  """The nightly runs after the first (the newest day on a window of two days, pushed), on a
  copy of its outputs: the same day again trains nothing, says so and succeeds; an older day is
  refused naming both spans; a new day trains on the window of it and the day before and is
  pushed, its Trainer warm-started from the model in production (--warm_start=production); the
  run history, in the report and from `python -m local_runner history`, shows every run."""
  import shutil
  import subprocess
  import sys
  from tests.conftest import REPO
  _, config, images, _ = run
  root = os.path.dirname(images)
  pattern = os.path.join(root, image_folders.DATE_PATTERN)
  output = str(tmp_path / "outputs")
  shutil.copytree(config.runner.output_dir, output)
  serving = os.path.join(output, "serving_model", config.runner.pipeline_name)
  first = os.path.basename(_pushed(config))
  newest = example_gen_utils.date_to_span_number(2026, 12, 1)

  same = run_pipeline(*_flags(output, pattern))
  assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
  assert (f"nothing new:     span {newest} already in production as version {first}; "
          "nothing new to train on") in same.stdout
  assert "pushed model:    nothing pushed this run" in same.stdout
  assert "Skipping execution for Trainer" in same.stdout
  assert sorted(os.listdir(serving)) == [first]

  older = run_pipeline(*_flags(output, pattern, f"--span={OLDER}", train_spans=1))
  assert older.returncode == 1, older.stdout[-3000:] + older.stderr[-3000:]
  assert (f"span {newest - 1} is older than span {newest} of production version {first}; "
          "refused") in older.stderr
  assert sorted(os.listdir(serving)) == [first]

  # The new day, warm-started from the model in production (trained on the day before).
  image_folders.write_dated_spans(root, PER_CLASS[NEWEST], ("2026-12-02",))
  new_day_flags = _flags(output, pattern, "--warm_start=production")
  new_day = run_pipeline(*new_day_flags)
  assert new_day.returncode == 0, new_day.stdout[-3000:] + new_day.stderr[-3000:]
  assert (f"span check:      span {newest + 1} is newer than span {newest} of production "
          f"version {first}: training") in new_day.stdout
  assert f"train split from 2 spans: {newest + 1} (" in new_day.stdout
  second = [version for version in sorted(os.listdir(serving)) if version != first]
  assert len(second) == 1 and f"pushed model:    {os.path.join(serving, second[0])}" in \
      new_day.stdout
  with open(os.path.join(serving, second[0], "assets.extra", "push_info.json")) as f:
    trained_on = json.load(f)["trained_on"]
  assert (trained_on["span"], trained_on["train_window"]) == (
      newest + 1, f"{newest + 1},{newest}")
  # Its Trainer started from the version in production, the one trained on the day before.
  start = RunRecord(from_flags(new_day_flags)).latest_output("model", producer="WarmStartModel")
  assert start.custom_properties["production_version"].string_value == os.path.join(
      serving, first)
  with open(os.path.join(serving, second[0], TRAINING_INFO_PATH)) as f:
    training = json.load(f)
  assert training["trainer_config"]["warm_start"] == "production"
  assert training["warm_start"]["source"].startswith("the model in production")
  assert training["warm_start"]["restored_variables"] > 0
  assert "warm-started:    the model in production" in new_day.stdout

  page = re.search(r"run report: +(\S+)", new_day.stdout).group(1)
  report = open(os.path.join(os.path.dirname(page), "report.md")).read()
  history = report[report.index("## History"):]
  rows = [line for line in history.splitlines() if re.match(r"\| \d", line)]
  assert [row.split(" | ")[2] for row in rows] == [
      "blessed, pushed", "skipped", "refused", "blessed, pushed"], history
  printed = subprocess.run([sys.executable, "-m", "local_runner", "history",
                            f"--output_dir={output}"], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
  assert printed.returncode == 0, printed.stderr
  assert len(printed.stdout.splitlines()) == 3 + 4  # Title, header, rule, the four runs.
