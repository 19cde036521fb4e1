"""bench/calibration_goals.py: which goals a run misses, the table that marks them, and the
figures over runs. (Its reading of a finished run is checked against the run report's own
figures in tests/pipeline_e2e_test.py, on that test's run.)"""
import numpy as np
import pytest

from bench import calibration_goals as goals

FAMILIES = {"noise": (-0.01, 0.004), "blur": (0.02, 0.004), "weather": (-0.03, 0.005),
            "digital": (0.01, 0.004)}


def _run(**changes):
  figures = dict(name="s42", kind="single", picks=(), cece=0.045, cece_sd=0.002,
                 cece_floor=0.023, cnll=0.31, family_gaps=FAMILIES, test_ece=0.007,
                 test_nll=0.009, blessed=True, validation_nll=0.15)
  return goals.RunFigures(**{**figures, **changes})


def test_a_run_within_every_bound_misses_nothing():
  assert goals.misses(_run()) == []
  assert goals.misses(_run(kind="ensemble", picks=(0, 1), cece=0.05)) == []  # At the bound.


def test_each_goal_missed_is_named_with_its_figure():
  assert goals.misses(_run(cece=0.0624)) == ["cECE 0.0624 > 0.06"]
  # The ensemble's bound is tighter: what a single model meets, an ensemble can miss.
  assert goals.misses(_run(kind="ensemble", picks=(1, 0), cece=0.0571)) == ["cECE 0.0571 > 0.05"]
  assert goals.misses(_run(family_gaps={**FAMILIES, "weather": (-0.053, 0.0045)})) == [
      "weather -0.0530"]
  assert goals.misses(_run(family_gaps={**FAMILIES, "digital": (0.055, 0.0047)})) == [
      "digital +0.0550"]
  assert goals.misses(_run(cnll=0.711)) == ["cNLL 0.7110 > 0.6"]
  assert goals.misses(_run(test_ece=0.0101)) == ["clean test ECE 0.0101 > 0.01"]
  assert goals.misses(_run(blessed=False, cece=0.07)) == ["not blessed", "cECE 0.0700 > 0.06"]
  # 100 images per slice: a perfectly calibrated model would measure 0.043 there.
  assert goals.misses(_run(cece_floor=0.043)) == [
      "cECE floor 0.0430 > 0.03 (slices too small)"]


def test_the_table_has_a_row_per_run_and_bolds_exactly_the_missed_figures():
  runs = [_run(), _run(name="s1", kind="ensemble", picks=(2, 0), cece=0.0571,
                       family_gaps={**FAMILIES, "weather": (-0.046, 0.005)}),
          _run(name="s2", cece_floor=0.043, cnll=0.711, test_ece=0.0101, blessed=False,
               family_gaps={**FAMILIES, "digital": (0.055, 0.0047)})]
  lines = goals.table(runs).splitlines()
  assert len(lines) == 5
  assert lines[0] == ("| run | model (picks) | cECE (sd) / floor | cNLL | noise | blur | weather | "
                      "digital | clean test ECE / NLL | validation-shift NLL | blessed |")
  assert all(line.count("|") == lines[0].count("|") for line in lines)
  assert lines[2] == ("| s42 | single | 0.0450 (0.0020) / 0.0230 | 0.3100 | -0.0100 (0.0040) | "
                      "+0.0200 (0.0040) | -0.0300 (0.0050) | +0.0100 (0.0040) | "
                      "0.0070 / 0.0090 | 0.1500 | yes |")
  assert lines[3].startswith("| s1 | ensemble [2, 0] | **0.0571 (0.0020)** / 0.0230 | 0.3100 |")
  assert "| -0.0460 (0.0050) |" in lines[3] and lines[3].count("**") == 2  # Within 0.05.
  assert lines[4] == ("| s2 | single | 0.0450 (0.0020) / **0.0430** | **0.7110** | "
                      "-0.0100 (0.0040) | +0.0200 (0.0040) | -0.0300 (0.0050) | "
                      "**+0.0550 (0.0047)** | **0.0101** / 0.0090 | 0.1500 | **no** |")


def test_over_runs_counts_the_runs_meeting_every_goal_and_gives_the_run_to_run_spread():
  singles = [_run(cece=value) for value in (0.0449, 0.0624, 0.0524)]
  ensemble = [_run(kind="ensemble", picks=(0, 1), cece=0.0455, validation_nll=None)]
  text = goals.over_runs(singles + ensemble).splitlines()
  assert text[0].startswith(
      f"single: 2 of 3 meet every goal; cECE mean {np.mean([0.0449, 0.0624, 0.0524]):.4f}, "
      f"sd {np.std([0.0449, 0.0624, 0.0524], ddof=1):.4f} (bound 0.06)")
  assert text[0].endswith("validation-shift NLL mean 0.1500, sd 0.0000")
  # One run has no spread; a run without the record leaves the validation figure out.
  assert text[1] == ("ensemble: 1 of 1 meet every goal; cECE mean 0.0455 (bound 0.05); worst "
                     "family |gap| mean 0.0300")


def test_worst_gap_is_the_largest_absolute_family_gap():
  assert _run().worst_gap == pytest.approx(0.03)
  assert _run(family_gaps={**FAMILIES, "digital": (0.055, None)}).worst_gap == pytest.approx(0.055)
