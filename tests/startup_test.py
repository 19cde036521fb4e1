"""What every process that imports TFX pays before doing anything (bench/startup.py)."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

POD_MODULES = ["components.evaluator", "kubeflow.trainjob_launcher"]

# One fresh interpreter for every check: the modules Kubeflow's pods import first, one at a
# time, then all of TFX; the distribution scans are counted over the whole process.
_IMPORTS = """
import importlib, importlib.metadata as metadata, json, sys
scans = []
scan = metadata.packages_distributions
metadata.packages_distributions = lambda: scans.append(1) or scan()
vertex_loaded_by = {}
for module in sys.argv[1:]:
  importlib.import_module(module)
  vertex_loaded_by[module] = "google.cloud.aiplatform" in sys.modules
import tfx.v1  # noqa: F401
vertex_loaded_by["tfx.v1"] = "google.cloud.aiplatform" in sys.modules
print(json.dumps({"scans": len(scans), "vertex_loaded_by": vertex_loaded_by}))
"""


@pytest.fixture(scope="module")
def fresh_imports():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")  # TF_USE_LEGACY_KERAS: conftest.py.
  done = subprocess.run([sys.executable, "-W", "ignore", "-c", _IMPORTS, *POD_MODULES], env=env,
                        cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
  return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_tfx_does_not_scan_every_installed_distribution_per_google_package(
    fresh_imports):
  """google-api-core 2.28-2.43 calls packages_distributions() (~0.2 s: every installed
  distribution's file list) for each Google Cloud client TFX's imports load, 14 of them, ~4 s
  a process; the lock keeps a google-api-core without that check."""
  scans = fresh_imports["scans"]
  assert scans <= 1, (f"importing TFX scanned the installed distributions {scans} times: "
                      "is google-api-core in the lock 2.28-2.43 (requirements.in)?")


@pytest.mark.parametrize("module", POD_MODULES)
def test_the_custom_components_kubeflow_pods_import_leave_the_vertex_ai_sdk_out(
    fresh_imports, module):
  """A pod imports its component's module before it runs; `tfx.v1` would load the Vertex AI
  SDK with it (its extensions, ~2 s a pod) though only Vertex's own Trainer needs it."""
  assert fresh_imports["vertex_loaded_by"]["tfx.v1"] is True  # Control: the check sees it.
  assert fresh_imports["vertex_loaded_by"][module] is False, f"{module} loads the Vertex AI SDK"
