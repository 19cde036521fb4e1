"""The calibration targets, checked on finished runs: each run's figures as its run report
computes them, each missed target marked, and per kind of model (single, ensemble) the mean and
the run-to-run standard deviation over the runs given.

  .venv/bin/python bench/calibration_goals.py --output_dir=RUN_1 --output_dir=RUN_2 ...

Every figure comes from the run's own records: the Evaluator's metrics (through the report's
functions, so the same digits as report.md), the report artifact's gate decision, and the
served model's ensemble and calibration records. docs/robustness.md's table of what the default
reaches is its output.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from bench import harness, run_outputs  # noqa: E402
import numpy as np  # noqa: E402

from components import evaluation_set, tfma_results  # noqa: E402
from components.calibration_metrics import ECE_NAME, NLL_NAME  # noqa: E402
from reporting.figures import (CALIBRATED, ECE_FLOOR, GAP, GAP_SD, TEST,  # noqa: E402
                               corrupted_ece_sd, corrupted_means, family_means)
from trainer_module import reference_corruptions  # noqa: E402
from trainer_module.calibration.record import read_calibration_info  # noqa: E402
from trainer_module.export import ENSEMBLE_FILE, read_record  # noqa: E402

# The targets: cECE per kind of model, and for every run the rest.
CECE_BOUND = {"single": 0.06, "ensemble": 0.05}
FAMILY_GAP_BOUND = 0.05  # |confidence - accuracy| of every corruption family.
CNLL_BOUND = 0.60
CLEAN_TEST_ECE_BOUND = 0.01
# "Measure where it can tell": slices large enough that a perfectly calibrated model's cECE
# (the floor) is at most this; below that size a cECE figure cannot tell calibration apart.
CECE_FLOOR_BOUND = 0.03


@dataclasses.dataclass(frozen=True)
class RunFigures:
  """One run's figures for the goals (calibrated probabilities; gaps are confidence minus
  accuracy, with their bootstrap standard deviations)."""
  name: str
  kind: str  # "single" or "ensemble".
  picks: Tuple[int, ...]  # The ensemble's picks (trial indices); () for a single model.
  cece: float
  cece_sd: Optional[float]
  cece_floor: float
  cnll: float
  family_gaps: Dict[str, Tuple[float, Optional[float]]]  # family -> (gap, its sd).
  test_ece: float
  test_nll: float
  blessed: bool
  validation_nll: Optional[float]  # The served map's calibrated validation-shift NLL.

  @property
  def worst_gap(self) -> float:
    return max(abs(gap) for gap, _ in self.family_gaps.values())


def misses(run: RunFigures) -> List[str]:
  """The goals this run misses, each named with its figure."""
  found = []
  if not run.blessed:
    found.append("not blessed")
  if run.cece_floor > CECE_FLOOR_BOUND:
    found.append(f"cECE floor {run.cece_floor:.4f} > {CECE_FLOOR_BOUND} (slices too small)")
  if run.cece > CECE_BOUND[run.kind]:
    found.append(f"cECE {run.cece:.4f} > {CECE_BOUND[run.kind]}")
  found += [f"{family} {gap:+.4f}" for family, (gap, _) in run.family_gaps.items()
            if abs(gap) > FAMILY_GAP_BOUND]
  if run.cnll > CNLL_BOUND:
    found.append(f"cNLL {run.cnll:.4f} > {CNLL_BOUND}")
  if run.test_ece > CLEAN_TEST_ECE_BOUND:
    found.append(f"clean test ECE {run.test_ece:.4f} > {CLEAN_TEST_ECE_BOUND}")
  return found


def _with_sd(value: float, sd: Optional[float], signed: bool = False) -> str:
  """Four decimals, the bootstrap deviation beside it in brackets: report.md's figure, with
  "(x)" for its "(sd x)", as the docs' tables of these runs print it."""
  text = f"{value:+.4f}" if signed else f"{value:.4f}"
  return text if sd is None else f"{text} ({sd:.4f})"


def table(runs: Sequence[RunFigures]) -> str:
  """A Markdown row per run; a missed goal's figure in bold."""
  families = list(dict.fromkeys(family for run in runs for family in run.family_gaps))
  bold = lambda text, missed: f"**{text}**" if missed else text  # noqa: E731
  rows = []
  for run in runs:
    model = run.kind + (f" {list(run.picks)}" if run.picks else "")
    gaps = [bold(_with_sd(*run.family_gaps[family], signed=True),
                 abs(run.family_gaps[family][0]) > FAMILY_GAP_BOUND)
            if family in run.family_gaps else "" for family in families]
    cells = [run.name, model,
             bold(_with_sd(run.cece, run.cece_sd), run.cece > CECE_BOUND[run.kind]) + " / " +
             bold(f"{run.cece_floor:.4f}", run.cece_floor > CECE_FLOOR_BOUND),
             bold(f"{run.cnll:.4f}", run.cnll > CNLL_BOUND), *gaps,
             bold(f"{run.test_ece:.4f}", run.test_ece > CLEAN_TEST_ECE_BOUND) +
             f" / {run.test_nll:.4f}",
             "" if run.validation_nll is None else f"{run.validation_nll:.4f}",
             "yes" if run.blessed else "**no**"]
    rows.append(cells)
  return harness.table(["run", "model (picks)", "cECE (sd) / floor", "cNLL", *families,
                        "clean test ECE / NLL", "validation-shift NLL", "blessed"], rows, left=2)


def _spread(values: Sequence[float]) -> str:
  """The mean, and the run-to-run standard deviation (ddof 1) when there are two runs or more."""
  return f"mean {np.mean(values):.4f}" + (
      f", sd {np.std(values, ddof=1):.4f}" if len(values) > 1 else "")


def over_runs(runs: Sequence[RunFigures]) -> str:
  """Per kind of model: how many runs meet every goal, and the _spread of cECE, the worst
  family |gap| and the validation-shift NLL."""
  lines = []
  for kind in ("single", "ensemble"):
    group = [run for run in runs if run.kind == kind]
    if not group:
      continue
    validation = [run.validation_nll for run in group if run.validation_nll is not None]
    lines.append(
        f"{kind}: {sum(not misses(run) for run in group)} of {len(group)} meet every goal; "
        f"cECE {_spread([run.cece for run in group])} (bound {CECE_BOUND[kind]}); worst family "
        f"|gap| {_spread([run.worst_gap for run in group])}" +
        (f"; validation-shift NLL {_spread(validation)}" if len(validation) == len(group)
         else ""))
  return "\n".join(lines)


def _corruptions(values: Dict) -> List[str]:
  """The reference corruptions the Evaluator sliced, in the reference order."""
  names = {value for slice_ in values for key, value in slice_
           if key == evaluation_set.CORRUPTION_KEY}
  return [name for name in reference_corruptions.BENCHMARK_CORRUPTIONS if name in names]


def read_run(output_dir: str) -> RunFigures:
  """The newest run in output_dir, read as its run report reads it; named by its directory."""
  run = run_outputs.Run(output_dir)
  report = run.record.latest_output("report")
  if report is None:
    raise FileNotFoundError(f"{output_dir}: the run recorded no report; is it a finished run?")
  values = tfma_results.load_metrics(run_outputs.local_uri(
      report.custom_properties["evaluation_uri"].string_value, run.config))
  corruptions = _corruptions(values)
  if not corruptions:
    raise ValueError(f"{output_dir}: the run evaluated no corrupted images; the goals are "
                     "measured on them.")
  means = corrupted_means(values, CALIBRATED, corruptions)
  families = {family: (figures[GAP], figures[GAP_SD])
              for family, figures in family_means(values, CALIBRATED, corruptions).items()}
  metric = lambda slice_, metric_name: tfma_results.metric(  # noqa: E731
      values, slice_, CALIBRATED, metric_name)
  test_ece, test_nll = metric(TEST, ECE_NAME), metric(TEST, NLL_NAME)
  missing = [name for name, value in (
      ("cECE", means[ECE_NAME]), ("the cECE floor", means[ECE_FLOOR]), ("cNLL", means[NLL_NAME]),
      ("the clean test ECE", test_ece), ("the clean test NLL", test_nll),
      *((f"the {family} family's gap", gap) for family, (gap, _) in families.items()))
             if value is None]
  if missing:
    raise ValueError(f"{output_dir}: the Evaluator's metrics lack {', '.join(missing)} (a set "
                     "or a corruption x severity slice without images); the goals cannot be read.")
  model_dir = run.model_dir()
  ensemble = read_record(model_dir, ENSEMBLE_FILE)
  calibration = read_calibration_info(model_dir) or {}
  return RunFigures(
      name=os.path.basename(os.path.normpath(output_dir)),
      kind="ensemble" if ensemble else "single",
      picks=tuple(ensemble["picks"]) if ensemble else (),
      cece=means[ECE_NAME], cece_sd=corrupted_ece_sd(values, CALIBRATED),
      cece_floor=means[ECE_FLOOR], cnll=means[NLL_NAME], family_gaps=families,
      test_ece=float(test_ece), test_nll=float(test_nll),
      blessed=report.custom_properties["blessed"].int_value == 1,
      validation_nll=calibration.get("validation_nll_after"))


def build_parser():
  return harness.parser(__doc__, harness.Flag(
      "output_dir", None, "a finished run's output directory; give it once per run",
      multiple=True))


def main():
  args = build_parser().parse_args()
  runs = [read_run(output_dir) for output_dir in args.output_dir]
  print(table(runs))
  print()
  print(over_runs(runs))


if __name__ == "__main__":
  main()
