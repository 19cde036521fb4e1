"""The run history: one entry per run, read back in time order, shown as one table."""
import os

import pytest

from components import run_history


def _entry(time, span, outcome=run_history.PUSHED, **fields):
  return run_history.Entry(time=time, run_id=f"run-{span}", span=span, data_version=0,
                           outcome=outcome, reason=fields.pop("reason", "why"), **fields)


def test_entries_are_read_back_oldest_first_and_only_the_last_n(tmp_path):
  history = str(tmp_path / "history")
  for time, span in (("2026-12-03T01:00:00Z", 3), ("2026-12-01T01:00:00Z", 1),
                     ("2026-12-02T01:00:00Z", 2)):
    run_history.append(history, _entry(time, span, accuracy=0.5))
  assert [e.span for e in run_history.read(history)] == [1, 2, 3]
  assert [e.span for e in run_history.read(history, last=2)] == [2, 3]
  assert run_history.read(history)[0].accuracy == 0.5


def test_a_missing_folder_is_an_empty_history_and_a_stray_file_is_skipped(tmp_path, caplog):
  assert run_history.read(str(tmp_path / "none")) == []
  history = str(tmp_path / "history")
  run_history.append(history, _entry("2026-12-01T01:00:00Z", 1))
  with open(os.path.join(history, "zz-broken.json"), "w") as f:
    f.write("{not json")
  with open(os.path.join(history, "notes.txt"), "w") as f:
    f.write("ignored")
  assert [e.span for e in run_history.read(history)] == [1]
  assert "zz-broken.json: not a history entry" in caplog.text


def test_an_unknown_outcome_is_refused():
  with pytest.raises(ValueError, match="outcome 'maybe'"):
    _entry("2026-12-01T01:00:00Z", 1, outcome="maybe")


def test_a_row_says_what_the_run_read_what_the_gate_decided_and_its_figures():
  pushed = _entry("2026-12-01T01:02:03Z", 20261201, blessed=True, pushed_version="1764550000",
                  reason="span 20261201 is newer", accuracy=0.91234, nll=0.3, ece=0.02,
                  corrupted_accuracy=0.5, corrupted_nll=1.5, corrupted_ece=0.1,
                  train_window="20261130,20261201")
  assert run_history.row(pushed) == (
      "20261201 [window 20261130,20261201]", "2026-12-01 01:02:03", "blessed, pushed",
      "span 20261201 is newer", "1764550000", "0.9123", "0.3000", "0.0200", "0.5000",
      "1.5000", "0.1000")
  refused = _entry("2026-12-02T00:00:00Z", 5, outcome=run_history.NOT_PUSHED, blessed=False,
                   reason="eval accuracy below 0.9")
  assert run_history.row(refused)[2:5] == ("refused by the gate, not pushed",
                                           "eval accuracy below 0.9", "")
  skipped = _entry("2026-12-03T00:00:00Z", 5, outcome=run_history.SKIPPED,
                   pushed_version="1764550000")
  assert run_history.row(skipped)[2] == "skipped" and run_history.row(skipped)[5:] == (
      ("n/a",) * 6)


def test_the_text_table_shows_control_characters_as_escapes():
  hostile = _entry("2026-12-01T00:00:00Z", 1, reason="a\nforged | row\x1b[31m")
  table = run_history.text_table([hostile])
  lines = table.splitlines()
  assert len(lines) == 3  # Header, rule, one row: the newline did not start another.
  assert "a\\nforged | row\\x1b[31m" in lines[2] and "\x1b" not in table
  assert lines[0].split() [:2] == ["span", "date"]
