"""bench/harness.py: the flags every benchmark declares, variants timed in turn, and the table."""
import subprocess
import sys
import time

import pytest

from bench import harness


def test_a_flag_takes_its_defaults_type_and_a_false_default_is_a_switch():
  parser = harness.parser("A benchmark. Its details.\n\nMore.", harness.Flag(
      "images", 4, "images timed"), harness.Flag("ratio", 0.5, "a ratio"), harness.Flag(
      "name", None, "a name"), harness.Flag("keep", False, "keep the files"))
  assert parser.description == "A benchmark. Its details."
  defaults = parser.parse_args([])
  assert (defaults.images, defaults.ratio, defaults.name, defaults.keep) == (4, 0.5, None, False)
  given = parser.parse_args(["--images", "7", "--ratio=0.25", "--name", "x", "--keep"])
  assert (given.images, given.ratio, given.name, given.keep) == (7, 0.25, "x", True)
  with pytest.raises(SystemExit):
    parser.parse_args(["--images", "many"])


def test_a_multiple_flag_is_required_and_collects_every_value_and_a_hidden_one_has_no_help():
  parser = harness.parser("Runs.", harness.Flag("output_dir", None, "a run", multiple=True),
                          harness.Flag("child", None, "the variant", hidden=True,
                                       choices=("a", "b")))
  assert parser.parse_args(["--output_dir=r1", "--output_dir", "r2"]).output_dir == ["r1", "r2"]
  with pytest.raises(SystemExit):
    parser.parse_args([])
  with pytest.raises(SystemExit):
    parser.parse_args(["--output_dir=r1", "--child=c"])
  assert "--child" not in parser.format_help()


def test_timed_returns_the_value_its_wall_seconds_and_the_cpu_seconds_spent_during_it(
    monkeypatch):
  readings = iter([10.0, 10.25])
  monkeypatch.setattr(harness, "cpu_seconds", lambda: next(readings))
  timed = harness.timed(lambda seconds: time.sleep(seconds) or "done", 0.05)
  assert timed.value == "done"
  assert 0.05 <= timed.wall < 5
  assert timed.cpu == 0.25


def test_cpu_seconds_count_this_process_and_its_finished_children():
  # Lower bounds only: whatever else the test process runs can add CPU, never remove it.
  before, thread_before = harness.cpu_seconds(), time.thread_time()
  while time.thread_time() - thread_before < 0.1:
    pass
  assert harness.cpu_seconds() - before >= 0.9 * (time.thread_time() - thread_before)
  before = harness.cpu_seconds()
  child = subprocess.run([sys.executable, "-c", (
      "import time\nwhile time.process_time() < 0.2: pass\nprint(time.process_time())")],
      check=True, capture_output=True, text=True)
  assert harness.cpu_seconds() - before >= 0.9 * float(child.stdout)


def test_variants_alternate_in_turn_and_in_reverse_every_other_round():
  order = []
  runs = harness.alternate({name: (lambda name=name: order.append(name) or name)
                            for name in ("a", "b", "c")}, 3)
  assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
  assert {name: [run.value for run in timed] for name, timed in runs.items()} == {
      "a": ["a"] * 3, "b": ["b"] * 3, "c": ["c"] * 3}


def test_the_table_aligns_its_text_columns_left_and_its_figures_right():
  lines = harness.table(["model", "policy", "img/s"], [("WRN-16-4", "float32", "62.1")],
                        left=2).splitlines()
  assert lines == ["| model | policy | img/s |", "| --- | --- | ---: |",
                   "| WRN-16-4 | float32 | 62.1 |"]


def test_execution_seconds_reads_only_the_named_components_executions(tmp_path):
  from ml_metadata.metadata_store import metadata_store
  from ml_metadata.proto import metadata_store_pb2
  connection = metadata_store_pb2.ConnectionConfig()
  connection.sqlite.filename_uri = str(tmp_path / "metadata.sqlite")
  connection.sqlite.connection_mode = 3  # READWRITE_OPENCREATE
  store = metadata_store.MetadataStore(connection)
  ids = {}
  for name in ("tfx.components.transform.component.Transform", "tfx.components.Trainer"):
    type_id = store.put_execution_type(metadata_store_pb2.ExecutionType(name=name))
    (ids[name],) = store.put_executions([metadata_store_pb2.Execution(type_id=type_id)])
  seconds = harness.execution_seconds(connection, "Transform")
  assert list(seconds) == [ids["tfx.components.transform.component.Transform"]]
  assert 0 <= seconds[ids["tfx.components.transform.component.Transform"]] < 60


def test_keep_is_a_switch_that_says_what_is_kept_and_when_it_is_deleted_otherwise():
  parser = harness.parser("Runs.", harness.keep("the runs", "once read"))
  assert parser.parse_args([]).keep is False and parser.parse_args(["--keep"]).keep is True
  assert " ".join(parser.format_help().split()).endswith(
      "--keep keep the runs (default: deleted once read)")
