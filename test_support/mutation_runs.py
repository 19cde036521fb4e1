"""How the fast tier's tests behave under `make mutation` (mutmut with forkserver isolation).

mutmut first runs the tests once to learn which test calls which function (the "stats" run),
crediting every call to the test being set up or run. A module-scoped fixture that calls the
mutated code (the export of the serving tests, the pipeline graph) would credit it to the first
test using it only, and its mutants would never meet the other tests: such fixtures take
`per_test_while_mapping` as their scope.

mutmut's fork server imports the tests (a `--collect-only` session) and forks one process per
mutant from it. Two things make those processes cheaper, both done from the root conftest:
- The collect-only session ends with `gc.freeze()`: without it, every forked process's garbage
  collector walks TensorFlow's whole imported heap (about 1.3 CPU-seconds a mutant, more than
  most mutants' tests take), writing to every page it visits.
- A mutant's tests run quickest first, by the durations mutmut recorded when it mapped tests to
  functions (`mutmut-stats.json`): the forkserver hands them over in no particular order, and a
  mutant is killed by its first failing test (`-x`).
"""
import gc
import json
import os

STATS_FILE = "mutmut-stats.json"  # written by mutmut in `mutants/`, the tests' working directory
MUTANT_MARK = "__mutmut_"  # in every mutant's name, never in mutmut's own phases ("stats", "fail")


def per_test_while_mapping(fixture_name, config):
  """A pytest scope: per test in mutmut's stats run, per module everywhere else."""
  del fixture_name, config  # The scope depends only on the run.
  return "function" if os.environ.get("MUTANT_UNDER_TEST") == "stats" else "module"


def mutant_under_test():
  """The mutant this process runs the tests against, or None outside a mutant's run."""
  name = os.environ.get("MUTANT_UNDER_TEST", "")
  return name if MUTANT_MARK in name else None


def quickest_first(items, stats_file=STATS_FILE):
  """Sorts the collected tests by their recorded duration; tests without one run last."""
  try:
    with open(stats_file) as f:
      durations = json.load(f)["duration_by_test"]
  except FileNotFoundError:
    return
  items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))


def after_collection(config, items):
  """Orders a mutant's tests, or freezes the heap a fork server's collect-only session built."""
  if mutant_under_test():
    quickest_first(items)
  elif config.option.collectonly:
    gc.freeze()
