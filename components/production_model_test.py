"""The model in production: what the Evaluator compares a candidate with, on every runner."""
import os
import shutil

import pytest

from tfx.orchestration.portable import data_types
from tfx.types import standard_artifacts

from components import evaluator, production_model, pusher


def _saved_model(path, content):
  os.makedirs(os.path.join(path, "variables"), exist_ok=True)
  with open(os.path.join(path, "saved_model.pb"), "w") as f:
    f.write(content)
  return path


def _trainer_output(path, content):
  """A Model artifact as the Trainer writes it (the SavedModel under Format-Serving)."""
  model = standard_artifacts.Model()
  model.uri = path
  _saved_model(os.path.join(path, "Format-Serving"), content)
  return model


def _pushed(base, content):
  """A version pushed by our Pusher (with the source's fingerprint in its push_info)."""
  model = _saved_model(os.path.join(base + "-sources", content), content)
  return pusher.push_version(model, base, pusher.saved_model_fingerprint(model))


def _run_executor(output_dir, serving, candidate=None, production_version=None):
  model = standard_artifacts.Model()
  model.uri = str(output_dir)
  os.makedirs(model.uri)
  exec_properties = {production_model.SERVING_DIRECTORY_KEY: serving}
  if production_version is not None:
    exec_properties[production_model.PRODUCTION_VERSION_KEY] = production_version
  inputs = {production_model.CANDIDATE_KEY: [candidate]} if candidate else {}
  production_model.ProductionModelExecutor().Do(inputs, {"model": [model]}, exec_properties)
  return model


def _served_content(model):
  with open(os.path.join(model.uri, "Format-Serving", "saved_model.pb")) as f:
    return f.read()


def test_nothing_in_production_gives_a_marked_snapshot_without_a_model(tmp_path):
  model = _run_executor(tmp_path / "snapshot", str(tmp_path / "serving"))
  assert not production_model.holds_model(model)
  assert model.get_int_custom_property(production_model.IN_PRODUCTION_KEY) == 0
  assert os.listdir(model.uri) == [production_model.NO_MODEL_FILE]  # Never an empty directory.


def test_the_newest_version_is_copied_with_its_fingerprint(tmp_path):
  serving = str(tmp_path / "serving")
  _pushed(serving, "old")
  newest = _pushed(serving, "new")
  model = _run_executor(tmp_path / "snapshot", serving)
  assert production_model.holds_model(model) and _served_content(model) == "new"
  assert model.get_int_custom_property(production_model.IN_PRODUCTION_KEY) == 1
  assert model.get_string_custom_property(production_model.PRODUCTION_VERSION_KEY) == newest
  assert model.get_string_custom_property(production_model.MODEL_FINGERPRINT_KEY) == \
      pusher.pushed_fingerprint(newest)


def test_a_candidate_already_serving_is_compared_with_what_it_replaced_never_itself(tmp_path):
  serving = str(tmp_path / "serving")
  _pushed(serving, "previous")
  _pushed(serving, "candidate")
  candidate = _trainer_output(str(tmp_path / "trainer"), "candidate")
  model = _run_executor(tmp_path / "snapshot", serving, candidate=candidate)
  assert _served_content(model) == "previous"
  # The first model ever pushed, rerun from cache: nothing else was in production.
  only = str(tmp_path / "only")
  _pushed(only, "candidate")
  assert not production_model.holds_model(
      _run_executor(tmp_path / "none", only, candidate=candidate))
  # A new candidate is compared with the newest version.
  other = _trainer_output(str(tmp_path / "other"), "another model")
  assert _served_content(_run_executor(tmp_path / "new", serving, candidate=other)) == "candidate"


def test_the_executor_copies_the_version_the_driver_chose(tmp_path):
  serving = str(tmp_path / "serving")
  chosen = _pushed(serving, "chosen")
  _pushed(serving, "pushed after the cache check")
  model = _run_executor(tmp_path / "snapshot", serving, production_version=chosen)
  assert _served_content(model) == "chosen"


def test_the_driver_keys_the_cache_on_the_chosen_version(tmp_path):
  serving = str(tmp_path / "serving")
  candidate = _trainer_output(str(tmp_path / "trainer"), "candidate")
  driver = production_model.ProductionModelDriver(metadata_handle=None)

  def key():
    info = data_types.ExecutionInfo(
        input_dict={production_model.CANDIDATE_KEY: [candidate]},
        exec_properties={production_model.SERVING_DIRECTORY_KEY: serving})
    return driver.run(info).exec_properties[production_model.PRODUCTION_VERSION_KEY].string_value

  assert key() == ""
  first = _pushed(serving, "a")
  assert key() == first
  os.makedirs(os.path.join(serving, ".incomplete-99999999999"))  # A push under way: not served.
  assert key() == first
  _pushed(serving, "candidate")  # The candidate itself, pushed: still compared with "a".
  assert key() == first
  second = _pushed(serving, "b")
  assert key() == second != first


def test_the_evaluator_drops_a_snapshot_of_nothing_and_keeps_a_real_baseline(tmp_path,
                                                                             monkeypatch):
  seen = []
  monkeypatch.setattr(evaluator.evaluator_executor.Executor, "Do",
                      lambda self, inputs, outputs, props: seen.append(inputs))
  empty = _run_executor(tmp_path / "empty", str(tmp_path / "nothing"))
  serving = str(tmp_path / "serving")
  _pushed(serving, "m")
  real = _run_executor(tmp_path / "real", serving)
  candidate = standard_artifacts.Model()
  for baseline in (empty, real):
    evaluator.ProductionBaselineExecutor().Do(
        {"model": [candidate], "baseline_model": [baseline]}, {}, {})
  assert "baseline_model" not in seen[0]
  assert seen[1]["baseline_model"] == [real] and seen[1]["model"] == [candidate]


def _damaged_versions(serving, good):
  """Higher-numbered entries that are not complete versions, each damaged another way."""
  def path(name):
    return os.path.join(serving, name)
  os.makedirs(path("9999999990"))  # Empty: a push killed before it wrote anything.
  os.makedirs(path("9999999991/variables"))  # Only variables/.
  with open(path("9999999992"), "w") as f:  # A file, not a directory.
    f.write("not a model")
  shutil.copytree(good, path("9999999993"))  # saved_model.pb cut short.
  with open(path("9999999993/saved_model.pb"), "r+") as f:
    f.truncate(1)
  shutil.copytree(good, path("9999999994"))  # A SavedModel this pipeline never pushed.
  os.remove(path(f"9999999994/{pusher.PUSH_INFO_PATH}"))
  os.symlink(good, path("9999999995"))  # A link: could point anywhere, change any time.
  os.makedirs(path("backup-of-9"))  # A foreign name: TF Serving ignores it too.
  return [path(name) for name in ("9999999990", "9999999991", "9999999992", "9999999993",
                                  "9999999994", "9999999995", "backup-of-9")]


def test_the_change_bounds_apply_against_the_newest_complete_version_above_damaged_ones(
    tmp_path, monkeypatch, caplog):
  serving = str(tmp_path / "serving")
  _pushed(serving, "old")
  good = _pushed(serving, "good")
  damaged = _damaged_versions(serving, good)
  candidate = _trainer_output(str(tmp_path / "trainer"), "candidate")
  info = data_types.ExecutionInfo(
      input_dict={production_model.CANDIDATE_KEY: [candidate]},
      exec_properties={production_model.SERVING_DIRECTORY_KEY: serving})
  chosen = production_model.ProductionModelDriver(metadata_handle=None).run(
      info).exec_properties[production_model.PRODUCTION_VERSION_KEY].string_value
  assert chosen == good
  for path in damaged:
    assert f"skipping {path}" in caplog.text or f"skipping version {path}:" in caplog.text
  snapshot = _run_executor(tmp_path / "snapshot", serving, candidate=candidate,
                           production_version=chosen)
  assert _served_content(snapshot) == "good"

  seen = []
  monkeypatch.setattr(evaluator.evaluator_executor.Executor, "Do",
                      lambda self, inputs, outputs, props: seen.append(inputs))
  evaluator.ProductionBaselineExecutor().Do(
      {"model": [candidate], "baseline_model": [snapshot]}, {}, {})
  assert seen[0]["baseline_model"] == [snapshot]  # TFMA applies the change bounds against it.


def test_versions_of_which_none_is_complete_stop_the_run_instead_of_a_first_blessing(tmp_path):
  source = _pushed(str(tmp_path / "elsewhere"), "complete, but elsewhere")
  serving = str(tmp_path / "serving")
  damaged = _damaged_versions(serving, source)
  with pytest.raises(production_model.NoCompleteVersion, match="none is complete") as error:
    _run_executor(tmp_path / "snapshot", serving)
  # Every numbered one, newest first; the foreign name is only warned about.
  assert str(error.value) == (
      f"The serving directory {serving} holds version(s) {', '.join(reversed(damaged[:-1]))} "
      "but none is complete (a SavedModel with the push record it matches), so what is in "
      "production cannot be compared with; the gate will not judge the candidate as a first "
      "blessing. Repair them or move them out of the serving directory, then run again.")


def test_each_damaged_version_passed_over_is_named_with_its_problem(tmp_path, caplog):
  serving = str(tmp_path / "serving")
  good = _pushed(serving, "good")
  damaged = _damaged_versions(serving, good)
  assert production_model.production_version_dir(serving, []) == good
  for path in damaged[:-1]:
    assert (f"Serving directory: skipping version {path}: {pusher.version_problem(path)}."
            in caplog.messages)


def test_damaged_versions_above_the_candidate_itself_leave_nothing_to_compare_with(tmp_path):
  """The one complete version is the candidate (pushed by an earlier run): no production model
  to compare with, and no error, as the damaged ones are not all there is."""
  serving = str(tmp_path / "serving")
  candidate = _trainer_output(str(tmp_path / "trainer"), "candidate")
  itself = _pushed(serving, "candidate")
  _damaged_versions(serving, itself)
  assert production_model.production_version_dir(serving, [candidate]) is None


def _renamed(version_dir, name):
  target = os.path.join(os.path.dirname(version_dir), name)
  os.rename(version_dir, target)
  return target


def test_a_zero_padded_version_is_found_under_its_own_name(tmp_path):
  serving = str(tmp_path / "serving")
  padded = _renamed(_pushed(serving, "padded"), "0001999999999")  # TF Serving: 1999999999.
  assert production_model.production_version_dir(serving, []) == padded
  assert _served_content(_run_executor(tmp_path / "snapshot", serving)) == "padded"


def test_the_newest_version_is_the_one_tf_serving_reads_not_python(tmp_path, caplog):
  serving = str(tmp_path / "serving")
  older = _pushed(serving, "older")
  spaced = _renamed(_pushed(serving, "spaced"), "9999999999 ")  # Served as 9999999999.
  _renamed(_pushed(serving, "too big"), "99999999999999999999")  # Beyond int64: never served.
  os.makedirs(os.path.join(serving, "²"))  # isdigit(), but no version.
  assert production_model.production_version_dir(serving, []) == spaced
  for name in ("99999999999999999999", "²"):
    assert (f"Serving directory: skipping {os.path.join(serving, name)}: not a version (TF "
            "Serving loads only entries named by an int64 number).") in caplog.messages
  assert f"skipping {older}" not in caplog.text  # An older version, not a refused name.


def test_of_two_names_of_one_version_the_one_tf_serving_loads_is_used(tmp_path, caplog):
  serving = str(tmp_path / "serving")
  first = _renamed(_pushed(serving, "zero-padded"), "0009999999999")
  loaded = _renamed(_pushed(serving, "plain"), "9999999999")  # Sorted after "000...": it wins.
  assert production_model.production_version_dir(serving, []) == loaded
  assert (f"Serving directory: skipping {first}: TF Serving loads its version from "
          f"{loaded}.") in caplog.messages


def test_a_file_in_place_of_the_serving_directory_is_named(tmp_path):
  serving = tmp_path / "serving"
  serving.write_text("not a directory")
  with pytest.raises(ValueError, match=f"{serving} is a file, not a directory of versions"):
    production_model.production_version_dir(str(serving), [])


def _with_signature(model_dir, inputs):
  """Rewrites a SavedModel's saved_model.pb with a serving_default signature of `inputs`
  ({name: dtype enum}), as a model exported with another input would have."""
  from tensorflow.core.protobuf import saved_model_pb2
  saved_model = saved_model_pb2.SavedModel()
  signature = saved_model.meta_graphs.add().signature_def["serving_default"]
  for name, dtype in inputs.items():
    signature.inputs[name].dtype = dtype
    signature.inputs[name].tensor_shape.dim.add().size = -1
  with open(os.path.join(model_dir, "saved_model.pb"), "wb") as f:
    f.write(saved_model.SerializeToString())


def test_a_production_model_with_another_input_signature_is_named_incompatible(
    tmp_path, monkeypatch):
  from tensorflow.core.framework import types_pb2
  monkeypatch.setattr(evaluator.evaluator_executor.Executor, "Do",
                      lambda self, inputs, outputs, props: None)
  serving = str(tmp_path / "serving")
  version = _pushed(serving, "old")
  _with_signature(version, {"images": types_pb2.DT_STRING})
  fingerprint = pusher.saved_model_fingerprint(version, exclude=(pusher.PUSH_INFO_PATH,))
  with open(os.path.join(version, pusher.PUSH_INFO_PATH), "w") as f:  # Pushed as changed.
    f.write(f'{{"model_fingerprint": "{fingerprint}"}}')
  snapshot = _run_executor(tmp_path / "snapshot", serving)
  candidate = _trainer_output(str(tmp_path / "trainer"), "candidate")
  _with_signature(os.path.join(candidate.uri, "Format-Serving"),
                  {"examples": types_pb2.DT_STRING})
  with pytest.raises(ValueError, match=(
      rf"The model in production \({version}\) is incompatible with the candidate: its "
      r"serving_default signature takes \{'images': 'string \[None\]'\}, the candidate's takes "
      r"\{'examples': 'string \[None\]'\}")):
    evaluator.ProductionBaselineExecutor().Do(
        {"model": [candidate], "baseline_model": [snapshot]}, {}, {})


def test_signature_inputs_describe_each_inputs_dtype_and_shape(tmp_path):
  """Read from saved_model.pb: an unknown rank, an unknown dimension and a dimension of 0."""
  import tensorflow as tf
  module = tf.Module()
  module.serve = tf.function(lambda examples, x, empty: {"y": tf.zeros([1])},
                             input_signature=[tf.TensorSpec(None, tf.string),
                                              tf.TensorSpec([None, 3], tf.float32),
                                              tf.TensorSpec([0, 2], tf.int64)])
  tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
  assert production_model.signature_inputs(str(tmp_path)) == {
      "empty": "int64 [0, 2]", "examples": "string unknown rank", "x": "float [None, 3]"}
  assert production_model.signature_inputs(str(tmp_path), "no_such_signature") is None


def test_a_model_directory_without_saved_model_pb_holds_no_model(tmp_path):
  model = standard_artifacts.Model()
  model.uri = str(tmp_path)
  os.makedirs(os.path.join(model.uri, "Format-Serving", "variables"))
  assert not production_model.holds_model(model)
  _saved_model(os.path.join(model.uri, "Format-Serving"), "graph")
  assert production_model.holds_model(model)


def test_inputs_are_compared_only_when_both_signatures_can_be_read(tmp_path):
  import tensorflow as tf
  readable = str(tmp_path / "readable")
  module = tf.Module()
  module.serve = tf.function(lambda examples: {"y": tf.zeros([1])},
                             input_signature=[tf.TensorSpec([None], tf.string)])
  tf.saved_model.save(module, readable, signatures={"serving_default": module.serve})
  unreadable = _saved_model(str(tmp_path / "unreadable"), "not a SavedModel")
  assert production_model.incompatibility(readable, unreadable) is None
  assert production_model.incompatibility(unreadable, readable) is None
  assert production_model.incompatibility(readable, readable) is None


def test_the_step_records_and_logs_what_it_found_in_production(tmp_path, caplog):
  import json
  caplog.set_level("INFO", logger=production_model.__name__)
  serving = str(tmp_path / "serving")
  nothing = _run_executor(tmp_path / "nothing", serving)
  with open(os.path.join(nothing.uri, production_model.NO_MODEL_FILE)) as f:
    assert f.read() == json.dumps({production_model.SERVING_DIRECTORY_KEY: serving}, indent=2)
  assert f"No model in production under {serving} to compare with." in caplog.messages
  version_dir = _pushed(serving, "served")
  found = _run_executor(tmp_path / "found", serving)
  assert f"The model in production, {version_dir}, is the baseline." in caplog.messages
  assert found.get_string_custom_property(production_model.MODEL_FINGERPRINT_KEY) == \
      pusher.pushed_fingerprint(version_dir)
  # A version chosen by the driver that carries no push record: no fingerprint to compare.
  bare = _saved_model(str(tmp_path / "bare" / "7"), "bare")
  chosen = _run_executor(tmp_path / "chosen", str(tmp_path / "bare"), production_version=bare)
  assert chosen.get_string_custom_property(production_model.MODEL_FINGERPRINT_KEY) == ""


def test_an_empty_serving_directory_has_nothing_in_production(tmp_path):
  os.makedirs(tmp_path / "serving")
  assert production_model.production_version_dir(str(tmp_path / "serving"), []) is None
