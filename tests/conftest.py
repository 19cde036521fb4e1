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
