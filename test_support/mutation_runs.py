"""How the fast tier's tests behave under `make mutation` (mutmut with forkserver isolation); a
pytest plugin, loaded by the root conftest.

mutmut first runs the tests once to learn which test calls which function (the "stats" run),
crediting every call to the test being set up or run. A module-scoped fixture that calls the
mutated code (the export of the serving tests, the pipeline graph) would credit it to the first
test using it only, and its mutants would never meet the other tests: such fixtures take
`per_test_while_mapping` as their scope.

mutmut's fork server imports the tests (a `--collect-only` session) and forks one process per
mutant from it. Two things make those processes cheaper:
- The collect-only session ends with `gc.freeze()`: without it, every forked process's garbage
  collector walks TensorFlow's whole imported heap (about 1.3 CPU-seconds a mutant, more than
  most mutants' tests take), writing to every page it visits.
- A mutant's tests run quickest first (a mutant is killed by its first failing test, `-x`), by
  what each took in the stats run, fixtures included: mutmut records only the test's call, and
  hands the tests over in no particular order, so a test whose fixture starts processes (the
  decompression-bomb check) could run first for every mutant.
"""
import gc
import json
import os

import pytest

DURATIONS_FILE = "mutation-test-durations.json"  # In `mutants/`, the tests' working directory.
MUTANT_MARK = "__mutmut_"  # In every mutant's name, never in mutmut's own phases ("stats", "fail").
MAPPING_PHASE = "stats"


def _phase():
  return os.environ.get("MUTANT_UNDER_TEST", "")


def per_test_while_mapping(fixture_name, config):
  """A pytest scope: per test in mutmut's stats run, per module everywhere else."""
  del fixture_name, config  # The scope depends only on the run.
  return "function" if _phase() == MAPPING_PHASE else "module"


def mutant_under_test():
  """The mutant this process runs the tests against, or None outside a mutant's run."""
  return _phase() if MUTANT_MARK in _phase() else None


def quickest_first(items, durations_file=DURATIONS_FILE):
  """Sorts the collected tests by their recorded duration; tests without one run last."""
  try:
    with open(durations_file) as f:
      durations = json.load(f)
  except FileNotFoundError:
    return
  items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))


class MappingDurations:
  """What each test took in a stats run: setup, call and teardown."""

  def __init__(self):
    self.seconds = {}

  def add(self, report):
    self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

  def save(self, durations_file=DURATIONS_FILE):
    """Adds them to the file's (mutmut maps new tests in a later, partial stats run)."""
    try:
      with open(durations_file) as f:
        recorded = json.load(f)
    except FileNotFoundError:
      recorded = {}
    recorded.update(self.seconds)
    with open(durations_file + ".tmp", "w") as f:
      json.dump(recorded, f)
    os.replace(durations_file + ".tmp", durations_file)
    self.seconds = {}


_mapping_durations = MappingDurations()


@pytest.hookimpl(trylast=True)  # After the conftest's own order.
def pytest_collection_modifyitems(config, items):
  """Orders a mutant's tests, or freezes the heap a fork server's collect-only session built."""
  if mutant_under_test():
    quickest_first(items)
  elif config.option.collectonly:
    gc.freeze()


def pytest_runtest_logreport(report):
  if _phase() == MAPPING_PHASE:
    _mapping_durations.add(report)


def pytest_sessionfinish(session):
  del session
  if _phase() == MAPPING_PHASE and _mapping_durations.seconds:
    _mapping_durations.save()
