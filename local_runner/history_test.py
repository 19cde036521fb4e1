"""`python -m local_runner history`: the run history's table, from the folder every run writes."""
import os
import subprocess
import sys

from components import run_history
from local_runner import history

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(history_dir, time, span, outcome, reason, **fields):
  run_history.append(history_dir, run_history.Entry(
      time=time, run_id=f"run-{span}", span=span, data_version=0, outcome=outcome,
      reason=reason, **fields))


def test_history_prints_the_last_runs_of_the_pipeline_oldest_first(tmp_path, capsys):
  output_dir = str(tmp_path / "out")
  history_dir = os.path.join(output_dir, "history", "wrn_image_classifier")
  _write(history_dir, "2026-12-01T03:00:00Z", 1, run_history.PUSHED, "no model in production",
         blessed=True, pushed_version="1764558000", accuracy=0.91)
  _write(history_dir, "2026-12-02T03:00:00Z", 1, run_history.SKIPPED,
         "span 1 already in production as version 1764558000", pushed_version="1764558000")
  _write(history_dir, "2026-12-03T03:00:00Z", 0, run_history.REFUSED_SPAN, "span 0 is older")
  assert history.main([f"--output_dir={output_dir}"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == f"The last 3 run(s) of wrn_image_classifier, oldest first ({history_dir}):"
  assert lines[1].split()[:3] == ["span", "date", "(UTC)"]
  assert "blessed, pushed" in lines[3] and "0.9100" in lines[3]
  assert "skipped" in lines[4] and "already in production as version 1764558000" in lines[4]
  assert "refused" in lines[5]
  assert history.main([f"--output_dir={output_dir}", "--history_runs=1"]) == 0
  assert len(capsys.readouterr().out.splitlines()) == 4  # Title, header, rule, one run.


def test_an_empty_history_says_so_and_a_foreign_flag_is_refused(tmp_path, capsys):
  assert history.main([f"--output_dir={tmp_path}"]) == 0
  assert "No runs recorded in" in capsys.readouterr().out
  assert history.main([f"--output_dir={tmp_path}", "--train_epochs=3"]) == 2
  assert "unknown flag(s) --train_epochs for `history`" in capsys.readouterr().err
  assert history.main(["--history_runs=0"]) == 2
  assert "history_runs" in capsys.readouterr().err


def test_python_m_local_runner_history_dispatches_to_it(tmp_path):
  history_dir = str(tmp_path / "elsewhere")
  _write(history_dir, "2026-12-01T03:00:00Z", 7, run_history.PUSHED, "no model in production")
  result = subprocess.run([sys.executable, "-m", "local_runner", "history",
                           f"--history_dir={history_dir}"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr
  assert "no model in production" in result.stdout
