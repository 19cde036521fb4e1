"""bench/drift_cost.py: the summary's drift line read back, and a run that did not do what its
variant measures refused (a run with the check that compared nothing, one without it that
checked). The benchmark's own runs are three pipeline runs: it is run by hand, not in the
suite."""

import pytest

from bench import drift_cost

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
