"""Shared by every test directory: one moto S3 server per session, and the process of the tests
that use s3:// in-process (test_support/s3_server.py); how the suite is spread over pytest-xdist's
workers (the Makefile runs it with `-n auto --dist loadfile`)."""
import pytest

import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from test_support.s3_server import (  # noqa: F401  (pytest finds them by name)
    pytest_configure_node, pytest_pyfunc_call, pytest_runtest_logreport, pytest_sessionfinish,
    pytest_unconfigure, s3, s3_server)

pytest_plugins = ["test_support.mutation_runs"]  # How the tests run under `make mutation`.

# The files whose tests take longest start first, so the workers finish together: the pipeline
# runs (`make test`), then the slowest of the fast tier, led by the file whose s3 tests start the
# session's s3 tests' process (the other files' s3 tests, reached later, read its reports).
LONGEST_FILES_FIRST = ("tests/pipeline_e2e_test.py", "tests/kfp_harness_test.py",
                       "tests/kfp_local_test.py", "tests/standalone_trainer_test.py",
                       "tests/portable_beam_test.py", "storage/object_storage_test.py",
                       "tests/augmix_transform_test.py", "trainer_module/ensemble_test.py",
                       "trainer_module/training_loop_test.py", "components/example_gen_test.py",
                       "tests/serving_signatures_test.py", "trainer_module/warm_start_test.py",
                       "trainer_module/training_job_test.py", "tests/calibration_metrics_test.py",
                       "trainer_module/reference_corruptions_test.py")


def pytest_collection_modifyitems(items):
  """The longest files first, then the other end-to-end files. (pytest-xdist's loadfile keeps
  a file's tests on one worker: a module-scoped run is made once.)"""
  items.sort(key=_start_rank)


def _start_rank(item):
  path = item.nodeid.split("::")[0]
  if path in LONGEST_FILES_FIRST:
    return LONGEST_FILES_FIRST.index(path)
  return len(LONGEST_FILES_FIRST) + (0 if item.get_closest_marker("e2e") else 1)
