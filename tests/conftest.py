import os
import subprocess
import sys

import pytest


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_pipeline(*flags, timeout=900):
  """Runs `python -m local_runner` as a user would; returns the completed process."""
  return subprocess.run([sys.executable, "-m", "local_runner", *flags], cwd=REPO,
                        capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def pipeline_runner():
  return run_pipeline


@pytest.fixture
def production_version(tmp_path, s3_server):
  """Puts a model in production before the run: the tiny network untrained, exported as the
  Trainer exports (with a transform graph of its own), pushed as the Pusher pushes
  (with its push record) and copied to the s3:// serving directory; returns a function of that
  directory giving the version's URI. (Imports here: TFT and TensorFlow load only for it.)"""
  import tensorflow_transform as tft

  from components import pusher
  from test_support import drift_baselines, kfp_harness
  from test_support.tiny_config import TINY_NETWORK, plain_trainer
  from test_support.transform_runs import digits_transform_dir
  from trainer_module.export import export_serving_model
  from trainer_module.model import wide_resnet

  transform_dir = digits_transform_dir()
  model_dir = str(tmp_path / "production")
  export_serving_model(wide_resnet(plain_trainer(**TINY_NETWORK)),
                       tft.TFTransformOutput(transform_dir), model_dir,
                       calibration={"temperature": 1.0})

  def put(serving_dir, with_baseline=False):
    """with_baseline: the version keeps a drift baseline of the digits, as the Pusher keeps
    the DriftCheck's (test_support/drift_baselines.py)."""
    baseline = (drift_baselines.digits_baseline(str(tmp_path / "baseline"))[0] if with_baseline
                else None)
    version_dir = pusher.push_version(model_dir, str(tmp_path / "serving"),
                                      pusher.saved_model_fingerprint(model_dir),
                                      baseline_dir=baseline)
    uri = f"{serving_dir}/{os.path.basename(version_dir)}"
    kfp_harness.upload(s3_server, version_dir, uri)
    return uri
  return put
