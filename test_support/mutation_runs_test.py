"""The fast tier under `make mutation`: fixtures calling mutated code mapped to every test, a
mutant's tests quickest first by what they took in the mapping run, the fork server's heap frozen
after it collected the tests."""
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
def durations_file(tmp_path):
  path = tmp_path / mutation_runs.DURATIONS_FILE
  path.write_text(json.dumps({"a_test.py::slow": 4.2, "a_test.py::quick": 0.1,
                              "b_test.py::middle": 1.0}))
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


def test_a_mutants_tests_run_quickest_first_and_unrecorded_ones_last(durations_file):
  items = _items("a_test.py::slow", "c_test.py::new", "b_test.py::middle", "a_test.py::quick")
  mutation_runs.quickest_first(items, durations_file)
  assert [item.nodeid for item in items] == [
      "a_test.py::quick", "b_test.py::middle", "a_test.py::slow", "c_test.py::new"]


def test_without_recorded_durations_the_order_is_left_alone(tmp_path):
  items = _items("a_test.py::slow", "a_test.py::quick")
  mutation_runs.quickest_first(items, str(tmp_path / "absent.json"))
  assert [item.nodeid for item in items] == ["a_test.py::slow", "a_test.py::quick"]


def test_a_mutant_run_reorders_its_tests(monkeypatch, tmp_path, durations_file):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("MUTANT_UNDER_TEST", "components.splits.x_split_for_key__mutmut_1")
  items = _items("a_test.py::slow", "a_test.py::quick")
  mutation_runs.pytest_collection_modifyitems(_config(collect_only=False), items)
  assert [item.nodeid for item in items] == ["a_test.py::quick", "a_test.py::slow"]


@pytest.mark.parametrize("collect_only, frozen", [(True, True), (False, False)])
def test_only_a_collect_only_session_outside_a_mutant_freezes_the_heap(
    monkeypatch, collect_only, frozen):
  monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
  gc.unfreeze()
  items = _items("a_test.py::slow", "a_test.py::quick")
  try:
    mutation_runs.pytest_collection_modifyitems(_config(collect_only), items)
    assert (gc.get_freeze_count() > 0) == frozen
  finally:
    gc.unfreeze()
  assert [item.nodeid for item in items] == ["a_test.py::slow", "a_test.py::quick"]


def _report(nodeid, duration):
  return types.SimpleNamespace(nodeid=nodeid, duration=duration)


def test_the_mapping_run_records_each_tests_setup_call_and_teardown_adding_to_earlier_runs(
    tmp_path):
  path = str(tmp_path / mutation_runs.DURATIONS_FILE)
  earlier = mutation_runs.MappingDurations()
  for nodeid, duration in [("old_test.py::kept", 0.5), ("a_test.py::fixture_heavy", 9.0)]:
    earlier.add(_report(nodeid, duration))
  earlier.save(path)
  durations = mutation_runs.MappingDurations()
  for nodeid, duration in [("a_test.py::fixture_heavy", 16.0), ("a_test.py::fixture_heavy", 0.2),
                           ("a_test.py::fixture_heavy", 0.1), ("a_test.py::plain", 0.3)]:
    durations.add(_report(nodeid, duration))
  durations.save(path)
  with open(path) as f:
    assert json.load(f) == pytest.approx({"old_test.py::kept": 0.5,
                                          "a_test.py::fixture_heavy": 16.3, "a_test.py::plain": 0.3})
  items = _items("a_test.py::fixture_heavy", "a_test.py::plain", "old_test.py::kept")
  mutation_runs.quickest_first(items, path)
  assert [item.nodeid for item in items] == [
      "a_test.py::plain", "old_test.py::kept", "a_test.py::fixture_heavy"]


@pytest.mark.parametrize("phase", ["", "components.splits.x_split_for_key__mutmut_1"])
def test_only_the_mapping_run_records_durations(monkeypatch, tmp_path, phase):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("MUTANT_UNDER_TEST", phase)
  mutation_runs.pytest_runtest_logreport(_report("a_test.py::plain", 0.3))
  mutation_runs.pytest_sessionfinish(session=None)
  assert not (tmp_path / mutation_runs.DURATIONS_FILE).exists()
