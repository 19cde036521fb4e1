"""The fast tier under `make mutation`: a mutant's tests quickest first, the fork server's heap
frozen after it collected the tests."""
import gc
import json
import types

import pytest

from test_support import mutation_runs


def _items(*nodeids):
  return [types.SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


def _config(collect_only):
  return types.SimpleNamespace(option=types.SimpleNamespace(collectonly=collect_only))


@pytest.fixture
def stats_file(tmp_path):
  path = tmp_path / "mutmut-stats.json"
  path.write_text(json.dumps({"duration_by_test": {"a_test.py::slow": 4.2, "a_test.py::quick": 0.1,
                                                   "b_test.py::middle": 1.0}}))
  return str(path)


@pytest.mark.parametrize("name, is_mutant", [
    ("trainer_module.export.x_one_batch__mutmut_3", "trainer_module.export.x_one_batch__mutmut_3"),
    ("stats", None), ("fail", None), ("", None), ("list_all_tests", None)])
def test_only_a_mutants_name_counts_as_a_mutant_run(monkeypatch, name, is_mutant):
  monkeypatch.setenv("MUTANT_UNDER_TEST", name)
  assert mutation_runs.mutant_under_test() == is_mutant


@pytest.mark.parametrize("phase, scope", [
    ("stats", "function"), ("", "module"), ("components.splits.x_split_for_key__mutmut_1", "module")])
def test_a_fixture_calling_mutated_code_is_made_per_test_only_while_mutmut_maps_tests(
    monkeypatch, phase, scope):
  monkeypatch.setenv("MUTANT_UNDER_TEST", phase)
  assert mutation_runs.per_test_while_mapping("exported", config=None) == scope


def test_outside_mutmut_no_mutant_is_under_test(monkeypatch):
  monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
  assert mutation_runs.mutant_under_test() is None


def test_a_mutants_tests_run_quickest_first_and_unrecorded_ones_last(stats_file):
  items = _items("a_test.py::slow", "c_test.py::new", "b_test.py::middle", "a_test.py::quick")
  mutation_runs.quickest_first(items, stats_file)
  assert [item.nodeid for item in items] == [
      "a_test.py::quick", "b_test.py::middle", "a_test.py::slow", "c_test.py::new"]


def test_without_recorded_durations_the_order_is_left_alone(tmp_path):
  items = _items("a_test.py::slow", "a_test.py::quick")
  mutation_runs.quickest_first(items, str(tmp_path / "absent.json"))
  assert [item.nodeid for item in items] == ["a_test.py::slow", "a_test.py::quick"]


def test_a_mutant_run_reorders_its_tests(monkeypatch, tmp_path, stats_file):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("MUTANT_UNDER_TEST", "components.splits.x_split_for_key__mutmut_1")
  items = _items("a_test.py::slow", "a_test.py::quick")
  mutation_runs.after_collection(_config(collect_only=False), items)
  assert [item.nodeid for item in items] == ["a_test.py::quick", "a_test.py::slow"]


@pytest.mark.parametrize("collect_only, frozen", [(True, True), (False, False)])
def test_only_a_collect_only_session_outside_a_mutant_freezes_the_heap(
    monkeypatch, collect_only, frozen):
  monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
  gc.unfreeze()
  items = _items("a_test.py::slow", "a_test.py::quick")
  try:
    mutation_runs.after_collection(_config(collect_only), items)
    assert (gc.get_freeze_count() > 0) == frozen
  finally:
    gc.unfreeze()
  assert [item.nodeid for item in items] == ["a_test.py::slow", "a_test.py::quick"]
