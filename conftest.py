"""Shared by every test directory: one moto S3 server per session, and the process of the tests
that use s3:// in-process (testing/s3_server.py); how the suite is spread over pytest-xdist's
workers (the Makefile runs it with `-n auto --dist loadgroup`)."""
import pytest

import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from testing.s3_server import (  # noqa: F401  (pytest finds them by name)
    pytest_pyfunc_call, pytest_runtest_logreport, pytest_sessionfinish, pytest_unconfigure, s3,
    s3_server)

# The files whose tests take longest start first, so the workers finish together: the pipeline
# runs (`make test`), then the slowest of the fast tier.
LONGEST_FILES_FIRST = ("tests/kfp_harness_test.py", "tests/kfp_local_test.py",
                       "tests/standalone_trainer_test.py", "tests/pipeline_e2e_test.py",
                       "tests/portable_beam_test.py", "tests/calibration_metrics_test.py",
                       "tests/augmix_transform_test.py")
# Session fixtures every worker may start for itself: cheaper than keeping their tests together.
CHEAP_SESSION_FIXTURES = {"s3_server"}


@pytest.hookimpl(tryfirst=True)  # Before xdist's own hook reads the groups.
def pytest_collection_modifyitems(items):
  """Tests that share a module-scoped run go to one worker (it is made once), as do those of a
  session fixture (by its name) and the s3 tests (they share the process they run in); any
  other test goes wherever a worker is free. The longest files first."""
  for item in items:
    group = _worker_group(item)
    if group:
      item.add_marker(pytest.mark.xdist_group(group))
  items.sort(key=_start_rank)


def _worker_group(item):
  if "s3" in item.fixturenames:
    return "s3"
  fixtures = [definitions[-1] for definitions in item._fixtureinfo.name2fixturedefs.values()]
  shared = sorted(f.argname for f in fixtures if f.scope == "session"
                  and not f.func.__module__.startswith("_pytest")
                  and f.argname not in CHEAP_SESSION_FIXTURES)
  if shared:
    return shared[0]
  if any(f.scope in ("module", "package") for f in fixtures):
    return item.nodeid.split("::")[0]
  return None


def _start_rank(item):
  path = item.nodeid.split("::")[0]
  if path in LONGEST_FILES_FIRST:
    return LONGEST_FILES_FIRST.index(path)
  return len(LONGEST_FILES_FIRST) + (0 if item.get_closest_marker("e2e") else 1)
