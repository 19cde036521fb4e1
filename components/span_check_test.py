"""The span check: a run trains only on data newer than what the model in production was
trained on (its push record), says why it does not, and writes the run history for it."""
import json
import os

import pytest

from tfx.orchestration.portable import data_types
from tfx.types import standard_artifacts

from components import pusher, run_history, serving_versions, span_check


def _saved_model(path, content):
  os.makedirs(os.path.join(path, "variables"), exist_ok=True)
  with open(os.path.join(path, "saved_model.pb"), "w") as f:
    f.write(content)
  return path


def _pushed(base, content, span=None, version=0, fingerprint=None):
  """A version pushed by our Pusher, recording the span it was trained on (None: no record,
  as a version pushed before spans were recorded)."""
  model = _saved_model(os.path.join(base + "-sources", content), content)
  trained_on = (None if span is None else
                serving_versions.trained_on(span, version, input_fingerprint=fingerprint))
  return pusher.push_version(model, base, pusher.saved_model_fingerprint(model),
                             trained_on=trained_on)


def _examples(span, version=0, fingerprint=None):
  """Examples as TFX's ExampleGen driver leaves them: span, version and the input fingerprint
  as custom properties (tfx/components/example_gen/driver.py update_output_artifact)."""
  examples = standard_artifacts.Examples()
  examples.set_int_custom_property("span", span)
  examples.set_int_custom_property("version", version)
  if fingerprint:
    examples.set_string_custom_property("input_fingerprint", fingerprint)
  return examples


def _run(tmp_path, serving, span, version=0, force=False, driver=False, fingerprint=None):
  decision = span_check.SpanDecision()
  decision.uri = str(tmp_path / "decision")
  exec_properties = {span_check.SERVING_DIRECTORY_KEY: serving,
                     span_check.HISTORY_DIR_KEY: str(tmp_path / "history"),
                     span_check.FORCE_RETRAIN_KEY: int(force)}
  if driver:  # As LocalDagRunner runs it: the driver's view of production first.
    info = data_types.ExecutionInfo(exec_properties=dict(exec_properties), input_dict={},
                                    pipeline_run_id="run-1")
    output = span_check.SpanCheckDriver.__new__(span_check.SpanCheckDriver).run(info)
    exec_properties[span_check.PRODUCTION_KEY] = output.exec_properties[
        span_check.PRODUCTION_KEY].string_value
  span_check.SpanCheckExecutor().Do({span_check.EXAMPLES_KEY: [
      _examples(span, version, fingerprint)]},
                                    {span_check.DECISION_KEY: [decision]}, exec_properties)
  return span_check.read_decision(decision), run_history.read(str(tmp_path / "history"))


def test_with_no_model_in_production_the_run_trains(tmp_path):
  decision, history = _run(tmp_path, str(tmp_path / "serving"), 20261201)
  assert decision["train"] and decision["span"] == 20261201
  assert decision["reason"] == "no model in production: training on span 20261201"
  assert decision["production_version"] == "" and history == []  # The report writes its entry.


def test_a_newer_span_trains(tmp_path):
  serving = str(tmp_path / "serving")
  version_dir = _pushed(serving, "m1", span=20261130)
  decision, _ = _run(tmp_path, serving, 20261201)
  version = os.path.basename(version_dir)
  assert decision["train"]
  assert decision["reason"] == (f"span 20261201 is newer than span 20261130 of production "
                                f"version {version}: training")


@pytest.mark.parametrize("driver", [False, True])
def test_the_same_span_trains_nothing_and_says_so_in_the_decision_and_the_history(tmp_path,
                                                                                  driver):
  serving = str(tmp_path / "serving")
  version = os.path.basename(_pushed(serving, "m1", span=20261201))
  decision, history = _run(tmp_path, serving, 20261201, driver=driver)
  assert not decision["train"]
  assert decision["reason"].startswith(
      f"span 20261201 already in production as version {version}; nothing new")
  assert decision["production_version"] == version
  with open(tmp_path / "decision" / span_check.DECISION_FILE) as f:
    assert json.load(f)["train"] is False
  (entry,) = history
  assert (entry.span, entry.outcome, entry.pushed_version, entry.reason) == (
      20261201, run_history.SKIPPED, version, decision["reason"])
  assert entry.run_id == ("run-1" if driver else "")


def test_the_same_span_from_input_files_that_changed_trains(tmp_path):
  """A folder without a span pattern is always span 0: its files' fingerprint tells."""
  serving = str(tmp_path / "serving")
  version = os.path.basename(_pushed(serving, "m1", span=0, fingerprint="listing-a"))
  decision, _ = _run(tmp_path, serving, 0, fingerprint="listing-b")
  assert decision["train"] and decision["reason"] == (
      f"the input files of span 0 changed since production version {version} was trained on "
      "them (their fingerprint differs): training")
  unchanged, history = _run(tmp_path, serving, 0, fingerprint="listing-a")
  assert not unchanged["train"] and history[0].outcome == run_history.SKIPPED


def test_a_newer_version_of_the_same_span_trains(tmp_path):
  serving = str(tmp_path / "serving")
  _pushed(serving, "m1", span=7, version=1)
  decision, _ = _run(tmp_path, serving, 7, version=2)
  assert decision["train"] and "span 7 version 2 is newer than span 7 version 1" in \
      decision["reason"]


def test_an_older_span_is_refused_naming_both_spans(tmp_path):
  serving = str(tmp_path / "serving")
  version = os.path.basename(_pushed(serving, "m1", span=20261201))
  with pytest.raises(span_check.RefusedSpan) as refused:
    _run(tmp_path, serving, 20261130)
  assert (f"span 20261130 is older than span 20261201 of production version {version}; "
          "refused") in str(refused.value)
  assert "--force_retrain" in str(refused.value)
  (entry,) = run_history.read(str(tmp_path / "history"))
  assert entry.outcome == run_history.REFUSED_SPAN and entry.span == 20261130


@pytest.mark.parametrize("span", [20261201, 20261130])
def test_force_retrain_trains_on_the_same_or_an_older_span(tmp_path, span):
  serving = str(tmp_path / "serving")
  _pushed(serving, "m1", span=20261201)
  decision, history = _run(tmp_path, serving, span, force=True)
  assert decision["train"] and decision["reason"].startswith("--force_retrain: training on")
  assert history == []


def test_a_production_model_without_a_record_of_its_data_is_trained_over(tmp_path):
  serving = str(tmp_path / "serving")
  version = os.path.basename(_pushed(serving, "m1", span=None))
  decision, _ = _run(tmp_path, serving, 0)
  assert decision["train"]
  assert decision["reason"].startswith(f"production version {version} records no training data")


def test_the_driver_keys_the_cache_on_production_and_the_run(tmp_path):
  """A new model in production, or a new run, changes the step's properties (its cache key):
  the check is never answered from a stale cache."""
  serving = str(tmp_path / "serving")

  def driver_state(run_id):
    info = data_types.ExecutionInfo(
        exec_properties={span_check.SERVING_DIRECTORY_KEY: serving}, input_dict={},
        pipeline_run_id=run_id)
    driver = span_check.SpanCheckDriver.__new__(span_check.SpanCheckDriver)
    return driver.run(info).exec_properties[span_check.PRODUCTION_KEY].string_value

  empty = driver_state("a")
  assert json.loads(empty) == {"production": None, "run_id": "a"}
  version_dir = _pushed(serving, "m1", span=3)
  state = json.loads(driver_state("a"))
  assert state["production"]["version_dir"] == version_dir
  assert state["production"]["trained_on"] == {"span": 3, "version": 0}
  assert driver_state("b") != driver_state("a")


def test_the_decision_reads_back_from_doubles_as_kubeflow_hands_them_over():
  decision = span_check.SpanDecision()
  decision.set_float_custom_property(span_check.TRAIN_KEY, 0.0)
  decision.set_float_custom_property(span_check.SPAN_KEY, 20261201.0)
  decision.set_string_custom_property(span_check.REASON_KEY, "why")
  assert span_check.read_decision(decision)["train"] is False
  assert span_check.read_decision(decision)["span"] == 20261201


def test_tfxs_kubeflow_entrypoint_finds_the_decisions_class_by_its_type_name():
  """The compiled spec names a custom type by its TYPE_NAME, which TFX's entrypoint imports."""
  from tfx.utils import import_utils
  assert import_utils.import_class_by_path(
      span_check.SpanDecision.TYPE_NAME) is span_check.SpanDecision


def test_a_decision_of_zeros_reads_back_as_kubeflows_entrypoint_hands_it_over():
  """TFX's Kubeflow entrypoint makes every custom property a struct value
  (kubeflow_v2_entrypoint_utils._parse_raw_artifact), which its getter reads as None when 0."""
  from tfx.types import artifact as artifact_lib
  decision = span_check.SpanDecision()
  for key, value in ((span_check.TRAIN_KEY, 0), (span_check.SPAN_KEY, 0),
                     (span_check.DATA_VERSION_KEY, 0), (span_check.REASON_KEY, "why"),
                     (span_check.PRODUCTION_VERSION_KEY, "")):
    decision.mlmd_artifact.custom_properties[key].struct_value.CopyFrom(
        artifact_lib._encode_struct_value(value))  # pylint: disable=protected-access
  assert decision.get_custom_property(span_check.SPAN_KEY) is None  # TFX's reading of a 0.
  read = span_check.read_decision(decision)
  assert (read["train"], read["span"], read["data_version"], read["reason"],
          read["production_version"]) == (False, 0, 0, "why", "")
