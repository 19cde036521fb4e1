"""What every process that imports TFX pays before doing anything (bench/startup.py)."""
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

_COUNT_SCANS = """
import importlib.metadata as metadata
scans = []
scan = metadata.packages_distributions
metadata.packages_distributions = lambda: scans.append(1) or scan()
import tfx.v1  # noqa: F401
print(len(scans))
"""


def test_importing_tfx_does_not_scan_every_installed_distribution_per_google_package():
  """google-api-core 2.28-2.43 calls packages_distributions() (~0.2 s: every installed
  distribution's file list) for each Google Cloud client TFX's imports load, 14 of them, ~4 s
  a process; the lock keeps a google-api-core without that check."""
  scans = int(_last_line_of_fresh_python(_COUNT_SCANS))
  assert scans <= 1, (f"importing TFX scanned the installed distributions {scans} times: "
                      "is google-api-core in the lock 2.28-2.43 (requirements.in)?")


_MODULES_LOADED = """
import importlib, sys
importlib.import_module(sys.argv[1])
print("google.cloud.aiplatform" in sys.modules)
"""


@pytest.mark.parametrize("module", ["components.evaluator", "kubeflow.trainjob_launcher"])
def test_the_custom_components_kubeflow_pods_import_leave_the_vertex_ai_sdk_out(module):
  """A pod imports its component's module before it runs; `tfx.v1` would load the Vertex AI
  SDK with it (its extensions, ~2 s a pod) though only Vertex's own Trainer needs it."""
  assert _last_line_of_fresh_python(_MODULES_LOADED, module) == "False", \
      f"{module} loads the Vertex AI SDK"


def _last_line_of_fresh_python(script, *args):
  """What `script` prints last, run by a new interpreter in the project's directory."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")  # TF_USE_LEGACY_KERAS: conftest.py.
  done = subprocess.run([sys.executable, "-W", "ignore", "-c", script, *args], env=env,
                        cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
  return done.stdout.strip().splitlines()[-1]
