"""A folder of labelled photos through the tiny pipeline to a pushed model that answers a
camera's JPEG with a class name (docs/pipeline.md, "Data")."""
import glob
import os
import re

import numpy as np
import pytest
import tensorflow as tf

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


def _flags(output, images):
  return [f"--output_dir={output}", "--dataset=image_dir", f"--image_dir={images}",
          "--skip_bad_images=true", *over_defaults(SMALL_MODEL, [
              "--train_epochs=40",  # 210 training images: 3 steps an epoch.
              "--min_eval_examples=30",  # The key hash holds out 49 of the 300 for eval.
              "--corruptions=gaussian_noise,defocus_blur"])]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """One pipeline run over 300 images of mixed formats, sizes and modes, a test image whose
  name is not ASCII, and two bad files."""
  images = tmp_path_factory.mktemp("photos")
  image_folders.write_image_folder(str(images), per_class=100)
  (images / "grass" / NOT_ASCII).write_bytes(image_folders.jpeg(
      colour=image_folders.CLASS_COLOURS["grass"]))
  (images / "grass" / "scan.jpg").write_bytes(image_folders.jpeg()[:2000])
  (images / "red_car" / "notes.txt").write_text("not an image")
  output = tmp_path_factory.mktemp("outputs")
  flags = _flags(output, images)
  process = run_pipeline(*flags)
  assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
  assert "pushed model:    /" in process.stdout, process.stdout[-3000:]
  return process, from_flags(flags), str(images)


def _pushed(config):
  versions = sorted(os.listdir(config.runner.serving_model_dir))
  assert len(versions) == 1
  return os.path.join(config.runner.serving_model_dir, versions[0])


@pytest.mark.e2e
def test_the_class_folders_become_the_schemas_classes(run):
  _, config, _ = run
  schemas = glob.glob(os.path.join(config.runner.pipeline_root, "ClassSchemaGen", "schema", "*",
                                    "schema.pbtxt"))
  assert len(schemas) == 1
  assert read_class_names(schemas[0]) == tuple(CLASSES)


@pytest.mark.e2e
def test_the_served_model_answers_a_camera_jpeg_as_its_ingested_png_with_the_class_name(run):
  _, config, _ = run
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
  process, config, images = run
  assert "skipped images:  2 bad file(s) or folder(s) left out" in process.stdout
  page = re.search(r"run report: +(\S+)", process.stdout).group(1)
  report = open(os.path.join(os.path.dirname(page), "report.md")).read()  # Beside the page.
  for index, name in enumerate(CLASSES):
    assert f"| {escape_markdown(name)} ({index}) | " in report
  # The report read the evaluation set, whose test images include one named in UTF-8.
  evaluation = RunRecord(config).latest_output("evaluation_set")
  assert f"grass/{NOT_ASCII}" in read_evaluation_set(evaluation.uri).source_keys
  assert "## Skipped input files" in report
  assert f"| `{images}/grass/scan.jpg` | cannot be decoded as JPEG" in report
  assert f"| `{images}/red_car/notes.txt` | not an image" in report


@pytest.mark.e2e
def test_the_same_folder_again_trains_nothing_says_so_and_the_history_shows_both_runs(
    run, tmp_path):
  """A scheduled run over the folder the model in production was trained on (span 0: no span
  pattern, and the same files: TFX's input fingerprint of its listing is unchanged). The run's
  output directory is copied first, so the other tests keep theirs."""
  import shutil
  import subprocess
  import sys
  from tests.conftest import REPO
  _, config, images = run
  output = str(tmp_path / "outputs")
  shutil.copytree(config.runner.output_dir, output)
  again = run_pipeline(*_flags(output, images))
  assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
  version = os.path.basename(_pushed(config))
  assert (f"nothing new:     span 0 already in production as version {version}; nothing new "
          "to train on") in again.stdout
  assert "pushed model:    nothing pushed this run" in again.stdout
  assert "Skipping execution for Trainer" in again.stdout
  assert sorted(os.listdir(os.path.join(output, "serving_model",
                                        config.runner.pipeline_name))) == [version]
  history = subprocess.run([sys.executable, "-m", "local_runner", "history",
                            f"--output_dir={output}"], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
  assert history.returncode == 0, history.stderr
  rows = history.stdout.splitlines()[3:]
  assert len(rows) == 2
  assert "blessed, pushed" in rows[0] and version in rows[0]
  assert "skipped" in rows[1] and f"already in production as version {version}" in rows[1]
  assert re.search(r"\b0\.\d{4}\b", rows[0]), "the trained run's figures"
