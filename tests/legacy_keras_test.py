"""TF_USE_LEGACY_KERAS, set in one place (trainer_module/__init__.py), reaches every process
before TensorFlow loads: each package's import, the processes they start, and the image."""
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO
from trainer_module import LEGACY_KERAS

PACKAGES = ("trainer_module", "components", "pipeline", "reporting", "local_runner", "kubeflow")


def _run(code: str) -> str:
  env = {name: value for name, value in os.environ.items() if name != LEGACY_KERAS[0]}
  env["PYTHONPATH"] = REPO
  return subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                        text=True, timeout=300, check=True).stdout.strip()


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_any_package_sets_it_for_the_process_and_its_children(package):
  child = f"import subprocess, sys; print(subprocess.run([sys.executable, '-c', " \
          f"'import os; print(os.environ.get(\"{LEGACY_KERAS[0]}\"))'], capture_output=True, " \
          "text=True).stdout.strip())"
  assert _run(f"import {package}; {child}") == LEGACY_KERAS[1]


def test_tensorflow_loaded_after_a_package_resolves_keras_2():
  """Without the variable, tf.keras is Keras 3 (`keras`), which TFX 1.16 cannot use."""
  assert _run("import components, tensorflow as tf; print(tf.keras.__name__)").startswith(
      "tf_keras")


def test_the_image_sets_it_for_processes_that_start_outside_the_project():
  """The TFX image's own entrypoints and Beam's SDK harness load TensorFlow first."""
  with open(os.path.join(REPO, "Dockerfile")) as f:
    env_lines = [line for line in f if line.startswith("ENV ")]
  assert any(re.search(rf"\b{LEGACY_KERAS[0]}={LEGACY_KERAS[1]}\b", line) for line in env_lines)
