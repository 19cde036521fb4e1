"""The run report's sections: what each says from the Evaluator's figures, the calibration
record, the ensemble record and the skipped files, as text and tables (render_test.py checks how
they are written)."""
import numpy as np

from components.calibration_metrics import RELIABILITY_NAME
from reporting import figures, render, sections
from reporting.document import BulletList, Chart, Code, Paragraph, Report, Table
from reporting.figures_test import _values
from trainer_module.class_names import CLASS_NAMES_FILE
from trainer_module.export import write_record
from trainer_module.features import PROBABILITIES_KEY
from trainer_module.reference_corruptions import BENCHMARK_CORRUPTIONS

_SETTINGS = figures.ReportSettings(
    pipeline_name="p", dataset="digits", model="WRN-10-1", num_classes=10,
    corruptions=BENCHMARK_CORRUPTIONS, bounds=())


def _plain(text):
  """Inline text as a reader reads it."""
  return "".join(part if isinstance(part, str) else part.text for part in text)


def _text(section):
  """The section's paragraphs, one text."""
  return "\n".join(_plain(block.text) for block in section.blocks if isinstance(block, Paragraph))


def _rows(section):
  """Every row of the section's tables, header rows included, as lists of cell texts."""
  return [[_plain(cell) for cell in row] for block in section.blocks if isinstance(block, Table)
          for row in (block.header, *block.rows)]


def test_the_warm_start_line_says_what_the_model_records(tmp_path):
  from trainer_module.export import ENSEMBLE_FILE, TRAINING_FILE, write_record
  single, ensemble, bare = (str(tmp_path / name) for name in ("single", "ensemble", "bare"))
  write_record(single, TRAINING_FILE, {"warm_start": None})
  write_record(ensemble, ENSEMBLE_FILE, {"members": []})
  assert sections.warm_start_summary(single) == "no, trained from scratch"
  assert sections.warm_start_summary(ensemble).startswith("per member: an ensemble")
  assert sections.warm_start_summary(bare) == "not recorded"


def _validation_fit(**overrides):
  """temperature.json of a fit on the validation corruptions."""
  return {"temperature_fit": "validation_corruptions", "temperature": 1.0,
          "clean_fit_temperature": 0.39, "eval_examples": 270, "validation_examples": 1000,
          "validation_corruptions": ["speckle_noise", "gaussian_blur", "spatter", "saturate"],
          "validation_nll_before": 1.2, "validation_nll_after": 1.2,
          "validation_ece_before": 0.15, "validation_ece_after": 0.15,
          "validation_nll_clean_fit": 2.5, "validation_ece_clean_fit": 0.3, **overrides}


def test_the_temperature_section_reports_the_validation_shift_apart_from_the_corrupted_set():
  calibration = _validation_fit()
  section = sections.temperature_section(_SETTINGS, {}, calibration)
  text = _text(section)
  assert "T = 1.0000, chosen on 270 clean eval examples and 1000 eval images" in text
  assert "alone would give T = 0.3900 (validation shift at that T: NLL 2.5000, ECE 0.3000)" in text
  assert ["validation shift (eval images, validation corruptions; chose T)", "1.2000", "1.2000",
          "0.1500", "0.1500", "", ""] in _rows(section)
  assert ["corrupted, mean over slices (cNLL, cECE)", "n/a", "n/a", "n/a", "n/a", "", ""] in \
      _rows(section)


def test_a_distance_map_is_described_and_charted_where_it_sharpens_and_softens():
  calibration = _validation_fit(
      temperature_fit="distance_detail_curve", temperature=float(np.exp(-1.0)),
      support_radius=14.25, distance_curve={"log_temperature": -1.0, "slope": 0.2,
                                            "detail_slope": 0.0},
      detail_scale={"mean": -0.4, "std": 0.3},
      eval_distance_scores=[-1.0, 0.0, 1.0], eval_detail_scores=[0.0, 0.0, 0.0],
      validation_distance_scores=[1.0, 2.0, 8.0, 9.0],
      validation_detail_scores=[0.0, 0.0, 0.0, 0.0],
      validation_slices=["spatter_1", "saturate_2", "spatter_5", "speckle_noise_4"])
  text = _text(sections.temperature_section(_SETTINGS, {}, calibration))
  assert "T(x) = exp(-1.0000 + 0.2000 z(x) +0.0000 s(x))" in text
  assert "A typical eval image (z = 0, s = 0) gets T = 0.3679" in text
  noise = sections.ServedImages(scores=np.array([10.0, 12.0, 1.0]),
                                confidence=np.array([0.9, 0.6, 0.99]),
                                correct=np.array([True, False, True]))
  section = sections.distance_section(calibration, {"corrupted test: noise": noise})
  assert [block.title for block in section.blocks if isinstance(block, Chart)] == [
      "temperature and distance"]
  # Median z, median T (exp(-1 + 0.2 z)), the share sharpened (T < 1: z < 5), the share beyond
  # the validation shift's 95th percentile (8 + 0.85 (9 - 8) = 8.85) and, for served test
  # images, their accuracy there and mean confidence minus it: (0.9 + 0.6) / 2 - 1 / 2.
  assert _rows(section) == [
      ["set", "images", "median z", "median T", "T < 1 (sharpened)", "beyond z = 8.85",
       "accuracy there", "confidence - accuracy there"],
      ["clean eval (fit)", "3", "0.00", "0.368", "100%", "0%", "", ""],
      ["validation shift, severities 1-2 (fit)", "2", "1.50", "0.499", "100%", "0%", "", ""],
      ["validation shift, severities 3-5 (fit)", "2", "8.50", "2.024", "0%", "50%", "", ""],
      ["corrupted test: noise", "3", "10.00", "2.718", "33%", "67%", "0.50", "+0.25"]]
  assert sections.distance_section(_validation_fit(), None) is None  # One T for every input.


def test_a_distance_and_detail_map_reads_each_images_own_detail_in_the_table():
  calibration = _validation_fit(
      temperature_fit="distance_detail_curve", temperature=float(np.exp(-1.0)),
      support_radius=14.25, distance_curve={"log_temperature": -1.0, "slope": 0.2,
                                            "detail_slope": -0.5},
      detail_scale={"mean": -0.4, "std": 0.3},
      eval_distance_scores=[-1.0, 0.0, 1.0], eval_detail_scores=[0.0, 0.0, 0.0],
      validation_distance_scores=[1.0, 2.0, 8.0, 9.0],
      validation_detail_scores=[0.0, 0.0, -2.0, -2.0],
      validation_slices=["spatter_1", "saturate_2", "gaussian_blur_5", "gaussian_blur_4"])
  text = _text(sections.temperature_section(_SETTINGS, {}, calibration))
  assert "T(x) = exp(-1.0000 + 0.2000 z(x) -0.5000 s(x))" in text
  assert "A typical eval image (z = 0, s = 0) gets T = 0.3679" in text
  blur = sections.ServedImages(scores=np.array([10.0, 10.0]), confidence=np.array([0.9, 0.6]),
                               correct=np.array([True, False]), details=np.array([-2.0, -2.0]))
  section = sections.distance_section(calibration, {"corrupted test: blur": blur})
  assert "for an image of typical detail (s = 0)" in _text(section)
  # T = exp(-1 + 0.2 z - 0.5 s): at s = -2, z = 8 and 9 give exp(1.6) and exp(1.8) (median
  # 5.501), z = 10 gives exp(2); at s = 0 (the curve alone) they would be 1.8-2.7.
  assert ["validation shift, severities 3-5 (fit)", "2", "8.50", "5.501", "0%", "50%", "", ""] \
      in _rows(section)
  assert ["corrupted test: blur", "2", "10.00", "7.389", "0%", "100%", "0.50", "+0.25"] in \
      _rows(section)


def _with_bootstrap(values, deviations):
  """`values` with the Evaluator's MeanSliceECE outputs on the corrupted slice and the family
  slices: {slice: (cECE sd, gap, gap sd)}."""
  for slice_, (ece_sd, gap, gap_sd) in deviations.items():
    values.setdefault(slice_, {}).update({
        ("candidate", PROBABILITIES_KEY, "mean_slice_ece_bootstrap_sd", False): ece_sd,
        ("candidate", PROBABILITIES_KEY, "mean_slice_confidence_gap", False): gap,
        ("candidate", PROBABILITIES_KEY, "mean_slice_confidence_gap_bootstrap_sd", False): gap_sd})
  return values


def test_cece_and_each_familys_gap_carry_their_bootstrap_deviations_when_the_evaluator_has_them():
  values = _values({"fog": 0.5, "contrast": 0.7})
  for row in values.values():
    row[("candidate", PROBABILITIES_KEY, RELIABILITY_NAME, False)] = np.array(
        [[40, 0.9, 0.6], [10, 0.3, 0.3]])
  settings = figures.ReportSettings(
      pipeline_name="p", dataset="digits", model="WRN-10-1", num_classes=10,
      corruptions=("fog", "contrast"), bounds=())
  without = sections.metric_section(settings, values)
  weather = next(row for row in _rows(without) if row[0] == "weather")
  assert weather[1:5] == ["fog", "0.5300", "0.5000", "0.1000"]
  assert not any("(sd " in cell for row in _rows(without) for cell in row)
  assert "bootstrap standard deviation" not in _text(without)

  _with_bootstrap(values, {figures.CORRUPTED: (0.0024, 0.012, 0.0031),
                           (("corruption_family", "weather"),): (0.0041, -0.044, 0.0052),
                           (("corruption_family", "digital"),): (0.0043, 0.0038, 0.0057)})
  assert figures.corrupted_ece_sd(values, PROBABILITIES_KEY) == 0.0024
  families = figures.family_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  assert (families["weather"][figures.ECE_SD],
          families["weather"][figures.GAP_SD]) == (0.0041, 0.0052)
  section = sections.metric_section(settings, values)
  assert "cECE's bootstrap standard deviation 0.0024" in _text(section)
  weather = next(row for row in _rows(section) if row[0] == "weather")
  assert weather[1:5] + weather[6:] == ["fog", "0.5300", "0.5000", "0.1000 (sd 0.0041)",
                                        "-0.0440 (sd 0.0052)"]
  assert _rows(section)[-1][-1] == "+0.0038 (sd 0.0057)"  # digital
  assert figures.headline(settings, values)["corrupted_ece_sd"] == 0.0024


def test_a_bootstrap_the_evaluator_could_not_make_is_left_out_not_shown_as_a_number():
  values = _with_bootstrap(_values({"fog": 0.5}), {figures.CORRUPTED: (
      float("nan"), 0.01, float("nan"))})
  assert figures.corrupted_ece_sd(values, PROBABILITIES_KEY) is None
  settings = figures.ReportSettings(
      pipeline_name="p", dataset="digits", model="WRN-10-1", num_classes=10,
      corruptions=("fog",), bounds=())
  assert "corrupted_ece_sd" not in figures.headline(settings, values)
  section = sections.metric_section(settings, values)
  assert "no bootstrap deviation: a corrupted example names no source image" in _text(section)
  assert ["weather", "fog", "0.5300", "0.5000", "0.1000", "n/a", "n/a"] in _rows(section)


def test_class_names_come_from_the_model_and_skipped_files_are_listed(tmp_path):
  assert sections.model_class_names(_SETTINGS, None) == [str(k) for k in range(10)]
  write_record(str(tmp_path), CLASS_NAMES_FILE, {"class_names": ["cat", "dog"]})
  assert sections.model_class_names(_SETTINGS, str(tmp_path)) == ["cat", "dog"]
  assert sections.skipped_section([]) is None
  section = sections.skipped_section([("/photos/cat/a.jpg", "empty file (0 bytes)"),
                                      ("/photos/dog", "empty class folder: a | b")])
  assert section.heading == "Skipped input files"
  assert _rows(section)[1:] == [["/photos/cat/a.jpg", "empty file (0 bytes)"],
                                ["/photos/dog", "empty class folder: a | b"]]  # As it was said.
  [table] = [block for block in section.blocks if isinstance(block, Table)]
  assert [type(cell) for cell, _ in table.rows] == [tuple, tuple] and isinstance(
      table.rows[0][0][0], Code)  # Paths shown as code.


def _ensemble_record(**selection):
  trial = {"hyperparameters": {"seed": 1, "label_smoothing": 0.01, "l2": 1e-4, "bn_l2": None},
           "temperature": 1.0, "eval": {"accuracy": 0.98, "nll": 0.05, "ece": 0.01}}
  return {"objective": "nll", "picks": [0], "ensemble_size": 2, "diversity": 0.0,
          "members": [{"name": "trial_0", "weight": 1.0}],
          "trials": [{"name": "trial_0", **trial, **selection.pop("trial", {})}], **selection}


def test_the_ensemble_section_says_what_selection_read_and_each_trials_value_alone():
  section = sections.ensemble_section(_ensemble_record(
      objective="shift_nll", calibrated_selection=True,
      selected_on="the eval split and the validation shift's 25 slices",
      trial={"objective_value": 0.1234}))
  assert ("Greedy selection with replacement on the eval split and the validation shift's 25 "
          "slices (shift_nll, each candidate after its own temperature)") in _text(section)
  header, trial = _rows(section)
  assert (header[-1], trial[-1]) == ("shift_nll alone", "0.1234")
  # A record written before selection could read the shift: the eval split, no value alone.
  older = sections.ensemble_section(_ensemble_record())
  assert "Greedy selection with replacement on the eval split (nll)" in _text(older)
  assert _rows(older)[-1][-1] == "n/a"


def test_the_history_section_tables_and_charts_the_last_runs_each_name_as_text():
  from components import run_history
  from reporting import render
  entries = [
      run_history.Entry(time="2026-12-01T03:00:00Z", run_id="a", span=20261201, data_version=0,
                        outcome=run_history.PUSHED, reason="no model in production",
                        blessed=True, pushed_version="1764558000", accuracy=0.9, nll=0.3,
                        ece=0.02, corrupted_accuracy=0.6, corrupted_nll=1.2,
                        corrupted_ece=0.08),
      run_history.Entry(time="2026-12-02T03:00:00Z", run_id="b", span=20261201, data_version=0,
                        outcome=run_history.SKIPPED, pushed_version="1764558000",
                        reason="span 20261201 already in production as version 1764558000"),
      run_history.Entry(time="2026-12-03T03:00:00Z", run_id="c", span=20261203, data_version=0,
                        outcome=run_history.NOT_PUSHED, blessed=False,
                        reason="<img src=x onerror=alert(1)> | forged", accuracy=0.5, nll=0.9,
                        ece=0.1)]
  section = sections.history_section(entries)
  assert section.heading == "History"
  rows = _rows(section)
  assert rows[0] == list(run_history.HEADER)
  assert [row[0] for row in rows[1:]] == ["20261201", "20261201", "20261203"]
  assert [row[2] for row in rows[1:]] == ["blessed, pushed", "skipped",
                                          "refused by the gate, not pushed"]
  assert rows[1][4:] == ["1764558000", "0.9000", "0.3000", "0.0200", "0.6000", "1.2000",
                         "0.0800"]
  assert rows[2][3] == "span 20261201 already in production as version 1764558000"
  (chart,) = [block for block in section.blocks if isinstance(block, Chart)]
  assert chart.png.startswith(b"\x89PNG")
  report = sections.Report("r", sections.BulletList([]), (section,))
  html = render.to_html(report)
  assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
  markdown = render.to_markdown(report)
  assert "\\<img src=x onerror=alert(1)\\> \\| forged" in markdown


def test_a_history_of_runs_that_trained_nothing_has_a_table_and_no_chart():
  from components import run_history
  entry = run_history.Entry(time="2026-12-02T03:00:00Z", run_id="b", span=1, data_version=0,
                            outcome=run_history.SKIPPED, reason="span 1 already in production")
  section = sections.history_section([entry])
  assert not [block for block in section.blocks if isinstance(block, Chart)]
  assert _rows(section)[1][2] == "skipped"


def test_the_report_names_the_span_read_and_the_spans_of_the_train_split():
  window = [{"span": 7, "version": 2, "folder": "s3://b/d/7/v2", "train_examples": 40},
            {"span": 6, "version": 1, "folder": "s3://b/d/6/v1", "train_examples": 35}]
  assert sections.span_summary(7, 2, window) == (
      "span 7, version 2 (s3://b/d/7/v2); train split from 2 spans: 7 (40 examples), 6 (35 "
      "examples)")
  assert sections.span_summary(3, None) == "span 3"  # A TFRecord span: no window recorded.
  assert sections.span_summary(0, None) is None  # TFX's span of a source without spans.
  lines = sections.about_run(_SETTINGS, None, None, "/tfma", "span 3").items
  assert lines[1] == ("data read: span 3",)
  assert ("data read: span 3",) not in sections.about_run(_SETTINGS, None, None, "/tfma").items


def _drift_result(blocks):
  from components import drift
  rng = np.random.default_rng(0)
  table = {drift.LABEL: np.repeat(np.arange(3), 100), drift.FORMAT: np.array(["png"] * 300),
           drift.BRIGHTNESS: rng.normal(0.3, 0.05, 300), drift.CONTRAST: rng.normal(0.3, 0.04, 300),
           drift.COLOURFULNESS: np.zeros(300), drift.NOISE: rng.normal(0.02, 0.005, 300),
           drift.HEIGHT: np.full(300, 32), drift.WIDTH: np.full(300, 32)}
  darker = {**table, drift.BRIGHTNESS: table[drift.BRIGHTNESS] * 0.7,
            drift.LABEL: np.repeat(np.arange(3), [150, 100, 50])}
  probabilities = rng.dirichlet(np.ones(3), 300)
  comparisons = drift.compare(table, darker, drift.Limits(0.03, 0.05, 0.01), probabilities,
                              probabilities[::-1] ** 3 / (probabilities[::-1] ** 3).sum(
                                  1, keepdims=True))
  return {"status": "drift", "limits": {"p_value": 0.01}, "production_version": "/s/<b>1",
          "comparisons": [c.to_json() for c in comparisons], "blocks_push": blocks,
          "moved": [c.describe() for c in comparisons if c.moved]}


def test_the_drift_section_names_what_moved_with_its_bound_p_value_and_a_chart_each():
  result = _drift_result(blocks=False)
  section = sections.drift_section(result)
  moved = [c for c in result["comparisons"] if c["moved"]]
  assert {c["feature"] for c in moved} >= {"label", "brightness", "model outputs (BBSD)"}
  charts = [block for block in section.blocks if isinstance(block, Chart)]
  assert [chart.title for chart in charts] == [f"{c['feature']}: baseline and new"
                                               for c in moved]
  table = next(block for block in section.blocks if isinstance(block, Table))
  brightness = next(row for row in table.rows if row[0] == ("brightness",))
  assert brightness[1:4] == (("Jensen-Shannon",), (f"{moved[1]['distance']:.4f}",), ("0.05",))
  markdown = _markdown(section)
  assert "A warning only" in markdown and "/s/<b>1" in markdown
  assert "<b>" not in render.to_html(Report("r", BulletList([]), (section,))).replace(
      "&lt;b&gt;", "")
  assert "the Pusher refuses" in _markdown(sections.drift_section(_drift_result(True)))
  assert "nothing to compare" in _markdown(sections.drift_section(
      {"status": "no production model", "comparisons": []}))


def _markdown(section):
  return render.to_markdown(Report("r", BulletList([]), (section,)))
