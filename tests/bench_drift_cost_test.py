"""bench/drift_cost.py: the summary's drift line read back, a run that did not do what its
variant measures refused, and (e2e) the benchmark on the tiny config: both variants run from a
model in production, the check comparing with its baseline and the other run without it."""
import os
import re
import subprocess
import sys

import pytest

from bench import drift_cost
from tests.conftest import REPO

SUMMARY = """Pipeline wrn_image_classifier run 1 finished in 61s (0 of 14 steps reused from cache).
  blessed:         yes
  drift:           {}
  run report:      outputs/reports/run-1/report.html
"""


def test_the_drift_line_of_the_summary_is_read_and_a_summary_without_one_refused():
  assert drift_cost.drift_status(SUMMARY.format("no drift")) == "no drift"
  moved = "2 feature(s) moved, a warning: the gate decided the push:"
  assert drift_cost.drift_status(SUMMARY.format(moved)) == moved
  with pytest.raises(RuntimeError, match="no drift line"):
    drift_cost.drift_status("Pipeline wrn_image_classifier run 1 finished in 61s.\n")


@pytest.mark.parametrize("variant, status", [
    (drift_cost.WITH, "no production model"),
    (drift_cost.WITH, "production has no baseline"),
    (drift_cost.WITH, "not checked"),
    (drift_cost.WITHOUT, "no drift"),
], ids=["nothing-in-production", "no-baseline", "check-left-out", "check-ran"])
def test_a_run_that_did_not_do_what_its_variant_measures_is_refused(variant, status):
  with pytest.raises(RuntimeError):
    drift_cost.check_status(variant, status)


@pytest.mark.parametrize("variant, status", [
    (drift_cost.WITH, "no drift"), (drift_cost.WITH, "1 feature(s) moved, a warning"),
    (drift_cost.WITHOUT, "not checked")])
def test_a_run_that_did_its_variants_work_passes(variant, status):
  drift_cost.check_status(variant, status)


@pytest.mark.e2e
def test_the_benchmark_on_the_tiny_config_times_both_variants_from_a_model_in_production(
    tmp_path):
  result = subprocess.run(
      [sys.executable, "bench/drift_cost.py", "--config=tiny", "--repeats=1",
       f"--work_dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=1800)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  rows = {row.split(" | ")[0].strip("| "): row for row in result.stdout.splitlines()
          if row.startswith("| with") and "variant" not in row}
  assert set(rows) == {drift_cost.WITH, drift_cost.WITHOUT}
  assert "not checked" in rows[drift_cost.WITHOUT]
  assert "no drift" in rows[drift_cost.WITH]  # The same data as production's: compared, equal.
  assert re.search(r"wall with/without: medians [\d.]+ / [\d.]+ s = [\d.]+x", result.stdout)
  assert os.listdir(tmp_path) and not [name for name in os.listdir(tmp_path)
                                      if name.startswith(("with-", "without-"))
                                      and not name.endswith(".log")]  # Runs deleted once read.
