"""Checkpoints: the newest intact one is restored, damaged ones are skipped, SIGTERM recorded."""
import gc
import glob
import logging
import os
import re
import shutil
import signal
import tempfile

import pytest
import tensorflow as tf

from trainer_module.checkpoints import (Checkpoints, ConfigRecord, StopSignal, TrainingState,
                                        damage, restore_order, state_file_problem)


def _saved(directory, values):
  variable = tf.Variable(0.0)
  checkpoints = Checkpoints(str(directory), max_to_keep=5, value=variable)
  for step, value in enumerate(values, start=1):
    variable.assign(value)
    checkpoints.save(step)
  return checkpoints


def _restored_value(directory):
  variable = tf.Variable(-1.0)
  path = Checkpoints(str(directory), max_to_keep=5, value=variable).restore_latest()
  return path, float(variable.numpy())


def test_the_newest_checkpoint_is_restored(tmp_path):
  _saved(tmp_path, [1.0, 2.0, 3.0])
  path, value = _restored_value(tmp_path)
  assert path.endswith("ckpt-3") and value == 3.0


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous(tmp_path, caplog):
  _saved(tmp_path, [1.0, 2.0])
  data_file = glob.glob(str(tmp_path / "ckpt-2.data-*"))[0]
  with open(data_file, "r+b") as f:
    f.truncate(os.path.getsize(data_file) - 2)
  assert damage(str(tmp_path / "ckpt-2"))
  path, value = _restored_value(tmp_path)
  assert path.endswith("ckpt-1") and value == 1.0
  problem = damage(str(tmp_path / "ckpt-2"))
  assert f"Checkpoint {tmp_path / 'ckpt-2'} is damaged ({problem}); skipping it." in caplog.text


@pytest.mark.parametrize("harm, problem", [
    ("truncate", "IndexError: Read less bytes than requested"),
    ("remove", r"OpError: .*ckpt-1\.data-00000-of-00001; No such file or directory")])
def test_a_damaged_checkpoint_is_named_with_its_error_type_and_first_line(tmp_path, harm, problem):
  _saved(tmp_path, [1.0])
  data_file = glob.glob(str(tmp_path / "ckpt-1.data-*"))[0]
  if harm == "truncate":
    with open(data_file, "r+b") as f:
      f.truncate(os.path.getsize(data_file) - 2)
  else:
    os.remove(data_file)
  assert re.fullmatch(problem, damage(str(tmp_path / "ckpt-1")))


def test_an_intact_checkpoint_has_no_damage(tmp_path):
  _saved(tmp_path, [1.0])
  assert damage(str(tmp_path / "ckpt-1")) is None


def test_the_training_state_counts_in_int64_and_no_optimizer_sees_it():
  """Examples seen pass 2**31 in a long run; an int32 counter would wrap."""
  state = TrainingState(seed=7, precision=2)
  state.examples_seen.assign(2**40)
  assert [variable.dtype for variable in state.variables] == [tf.int64] * 3
  assert state.trainable_variables == ()
  assert (int(state.examples_seen), int(state.seed), int(state.precision)) == (2**40, 7, 2)


def test_the_config_record_holds_two_strings_no_optimizer_sees():
  record = ConfigRecord('{"training": {}}')
  assert [variable.dtype for variable in record.variables] == [tf.string, tf.string]
  assert record.trainable_variables == ()
  assert (record.config.numpy(), record.warm_start.numpy()) == (b'{"training": {}}', b"")


def test_when_every_checkpoint_is_damaged_restore_refuses(tmp_path):
  _saved(tmp_path, [1.0])
  os.remove(glob.glob(str(tmp_path / "ckpt-1.data-*"))[0])
  with pytest.raises(RuntimeError, match="No checkpoint in .* can be restored"):
    _restored_value(tmp_path)


@pytest.mark.parametrize("leftover", ["directory", "file"])
def test_leftovers_of_an_interrupted_save_are_removed(tmp_path, leftover):
  _saved(tmp_path, [1.0])
  if leftover == "directory":
    os.makedirs(tmp_path / "ckpt-2_temp")
  else:
    (tmp_path / "ckpt-2_temp").write_bytes(b"half a shard")
  path, _ = _restored_value(tmp_path)
  assert path.endswith("ckpt-1") and not os.path.exists(tmp_path / "ckpt-2_temp")


def test_no_checkpoint_means_a_fresh_start(tmp_path):
  assert _restored_value(tmp_path) == (None, -1.0)


def test_sigterm_is_recorded_and_the_previous_handler_restored(caplog):
  def previous(signum, frame):  # Not the default: restoring must mean this one, not SIG_DFL.
    raise AssertionError("the previous handler ran while StopSignal was in place")

  original = signal.signal(signal.SIGTERM, previous)
  try:
    with StopSignal() as stop:
      assert stop.received is False  # A bool: a multi-worker run sums it over workers as int.
      os.kill(os.getpid(), signal.SIGTERM)
      assert stop.received is True
    assert (f"Received signal {int(signal.SIGTERM)}: saving a checkpoint and stopping after "
            "this step.") in caplog.messages
    assert signal.getsignal(signal.SIGTERM) is previous
  finally:
    signal.signal(signal.SIGTERM, original)


@pytest.mark.parametrize("garbage", [b"model_checkpoint_path: \"ckpt-3\"\x00 garbled\n",
                                     b"not a checkpoint state\n", b"\xff\xfe\x00\x81\x92", b""],
                         ids=["text-with-a-nul", "text", "binary", "empty"])
def test_an_unreadable_state_file_is_rebuilt_from_the_checkpoint_files(tmp_path, caplog,
                                                                       garbage):
  _saved(tmp_path, [1.0, 2.0, 3.0])
  with open(tmp_path / "checkpoint", "wb") as f:
    f.write(garbage)
  path, value = _restored_value(tmp_path)
  assert path.endswith("ckpt-3") and value == 3.0  # Not a fresh start at step 0.
  assert f"state file {tmp_path / 'checkpoint'} is unusable" in caplog.text
  # The rebuilt state counts the old checkpoints: a new save keeps them (max_to_keep=5).
  checkpoints = Checkpoints(str(tmp_path), max_to_keep=5, value=tf.Variable(4.0))
  checkpoints.save(4)
  assert [os.path.basename(p) for p in tf.train.get_checkpoint_state(
      str(tmp_path)).all_model_checkpoint_paths] == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]


def test_an_unreadable_state_file_without_checkpoint_files_is_refused_by_name(tmp_path):
  with open(tmp_path / "checkpoint", "wb") as f:
    f.write(b"\xff garbage")
  with pytest.raises(RuntimeError, match=f"state file {tmp_path / 'checkpoint'} is unusable"):
    _restored_value(tmp_path)


def _saved_at(directory, steps):
  variable = tf.Variable(0.0)
  checkpoints = Checkpoints(str(directory), max_to_keep=10, value=variable)
  for step in steps:
    variable.assign(float(step))
    checkpoints.save(step)


def _state_file_says(directory, text):
  with open(directory / "checkpoint", "w") as f:
    f.write(text)


def test_a_one_line_state_file_resumes_where_tensorflow_says(tmp_path):
  _saved_at(tmp_path, [10, 20, 30, 40])
  _state_file_says(tmp_path, 'model_checkpoint_path: "ckpt-40"\n')
  assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-40")
  path, value = _restored_value(tmp_path)
  assert path == str(tmp_path / "ckpt-40") and value == 40.0  # Not a fresh start at step 0.


def test_a_state_file_naming_only_a_missing_checkpoint_falls_back_to_the_intact_ones(
    tmp_path, caplog):
  _saved_at(tmp_path, [10, 20, 30, 40])
  _state_file_says(tmp_path, 'model_checkpoint_path: "ckpt-50"\n'
                             'all_model_checkpoint_paths: "ckpt-50"\n')
  path, value = _restored_value(tmp_path)
  assert path == str(tmp_path / "ckpt-40") and value == 40.0
  assert "ckpt-50" in caplog.text
  assert sorted(glob.glob(str(tmp_path / "ckpt-*.index"))) == [
      str(tmp_path / f"ckpt-{step}.index") for step in (10, 20, 30, 40)]


def test_when_no_checkpoint_can_be_restored_the_advice_deletes_nothing(tmp_path):
  _saved_at(tmp_path, [10])
  os.remove(glob.glob(str(tmp_path / "ckpt-10.data-*"))[0])
  with pytest.raises(RuntimeError) as error:
    _restored_value(tmp_path)
  assert f"No checkpoint in {tmp_path} can be restored (ckpt-10: " in str(error.value)
  assert ("). Repair them, or move them out of the directory to train from scratch."
          in str(error.value))
  assert "remove" not in str(error.value)


def test_the_data_position_and_seed_survive_a_checkpoint_past_two_to_the_31_examples(tmp_path):
  """The number of examples consumed is an int64 counter: a long run's position (and its seed)
  comes back exactly, never wrapped around."""
  state = TrainingState(seed=2**40 + 7, precision=2)
  state.examples_seen.assign(5_000_000_000)
  Checkpoints(str(tmp_path), max_to_keep=1, state=state).save(1)
  restored = TrainingState(seed=0, precision=0)
  Checkpoints(str(tmp_path), max_to_keep=1, state=restored).restore_latest()
  assert (int(restored.examples_seen.numpy()), int(restored.seed.numpy()),
          int(restored.precision.numpy())) == (5_000_000_000, 2**40 + 7, 2)


def _said(caplog):
  """What this module logged (TensorFlow's own warnings aside), each message whole."""
  return [record.getMessage() for record in caplog.records
          if record.name == "trainer_module.checkpoints"]


def test_the_chief_names_each_checkpoint_it_saves(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="trainer_module.checkpoints")
  _saved(tmp_path, [1.0, 2.0])
  assert _said(caplog) == [f"Saved checkpoint {tmp_path / 'ckpt-1'}.",
                           f"Saved checkpoint {tmp_path / 'ckpt-2'}."]


def test_a_non_chief_worker_saves_to_scratch_space_that_goes_with_it(tmp_path, caplog):
  """Every worker must save (the save is a collective step), but only the chief's checkpoints
  are the run's: the others go to a temporary directory, deleted with the Checkpoints object."""
  caplog.set_level(logging.INFO, logger="trainer_module.checkpoints")
  directory = tmp_path / "run"
  checkpoints = Checkpoints(str(directory), max_to_keep=5, is_chief=False, value=tf.Variable(1.0))
  checkpoints.save(1)
  scratch = checkpoints.manager.directory
  assert os.path.dirname(scratch) == tempfile.gettempdir()
  assert re.fullmatch(r"checkpoints-\w+", os.path.basename(scratch))
  assert os.path.exists(os.path.join(scratch, "ckpt-1.index"))
  assert not glob.glob(str(directory / "*"))
  assert _said(caplog) == []  # The chief speaks for the run.
  del checkpoints
  gc.collect()
  assert not os.path.exists(scratch)


def test_at_most_max_to_keep_checkpoints_are_kept_the_newest(tmp_path):
  variable = tf.Variable(0.0)
  checkpoints = Checkpoints(str(tmp_path), max_to_keep=2, value=variable)
  for step in range(1, 5):
    checkpoints.save(step)
  assert sorted(os.path.basename(path) for path in glob.glob(str(tmp_path / "ckpt-*.index"))) == [
      "ckpt-3.index", "ckpt-4.index"]


def test_the_check_vets_an_intact_checkpoint_before_it_is_restored(tmp_path):
  _saved(tmp_path, [1.0, 2.0])
  vetted = []

  def refuse(path):
    vetted.append(path)
    raise ValueError(f"{path} was written by another config")

  variable = tf.Variable(-1.0)
  checkpoints = Checkpoints(str(tmp_path), max_to_keep=5, check=refuse, value=variable)
  with pytest.raises(ValueError, match=r"ckpt-2 was written by another config$"):
    checkpoints.restore_latest()
  assert vetted == [str(tmp_path / "ckpt-2")] and float(variable.numpy()) == -1.0


def test_a_damaged_checkpoint_is_skipped_with_one_warning_naming_it_and_the_damage(tmp_path,
                                                                                   caplog):
  _saved(tmp_path, [1.0, 2.0])
  os.remove(glob.glob(str(tmp_path / "ckpt-2.data-*"))[0])
  problem = damage(str(tmp_path / "ckpt-2"))
  caplog.clear()
  path, value = _restored_value(tmp_path)
  assert path == str(tmp_path / "ckpt-1") and value == 1.0
  assert _said(caplog) == [f"Checkpoint {tmp_path / 'ckpt-2'} is damaged ({problem}); skipping it."]


def test_when_no_checkpoint_can_be_restored_the_error_names_each_and_its_damage(tmp_path):
  _saved(tmp_path, [1.0, 2.0])
  for data_file in glob.glob(str(tmp_path / "ckpt-*.data-*")):
    os.remove(data_file)
  expected = (f"No checkpoint in {tmp_path} can be restored ("
              f"ckpt-2: {damage(str(tmp_path / 'ckpt-2'))}; "
              f"ckpt-1: {damage(str(tmp_path / 'ckpt-1'))})"
              ". Repair them, or move them out of the directory to train from scratch.")
  with pytest.raises(RuntimeError, match=f"^{re.escape(expected)}$"):
    _restored_value(tmp_path)


@pytest.mark.parametrize("garbage, problem", [
    (b"not a checkpoint state\n", "TensorFlow cannot parse it (its warning above says where)"),
    (b"\xff\xfe\x00\x81\x92",
     "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    (b"", "ValueError: Invalid checkpoint state loaded from {directory}")],
                         ids=["text", "binary", "empty"])
def test_a_rebuilt_state_file_is_reported_with_why_and_from_which_files(tmp_path, caplog, garbage,
                                                                        problem):
  _saved(tmp_path, [1.0, 2.0, 3.0])
  with open(tmp_path / "checkpoint", "wb") as f:
    f.write(garbage)
  problem = problem.format(directory=tmp_path)
  assert state_file_problem(str(tmp_path)) == problem
  caplog.clear()
  _restored_value(tmp_path)
  assert _said(caplog) == [
      f"The checkpoint state file {tmp_path / 'checkpoint'} is unusable ({problem}); rebuilt "
      "from the checkpoint files: ckpt-1, ckpt-2, ckpt-3."]


def test_an_intact_state_file_is_left_as_tensorflow_wrote_it(tmp_path, caplog):
  _saved(tmp_path, [1.0, 2.0])
  written = (tmp_path / "checkpoint").read_bytes()
  assert state_file_problem(str(tmp_path)) is None
  caplog.clear()
  assert _restored_value(tmp_path) == (str(tmp_path / "ckpt-2"), 2.0)
  assert _said(caplog) == [] and (tmp_path / "checkpoint").read_bytes() == written


def test_the_restore_order_is_tensorflows_choice_then_the_listed_then_the_unlisted(tmp_path,
                                                                                  caplog):
  """A state file can lag behind the files (an older copy put back): TensorFlow resumes from
  the checkpoint it names, so that comes first; a listed checkpoint whose files are gone is
  skipped with a warning and the rest are still tried; unlisted ckpt-N files come last."""
  _saved_at(tmp_path, [10, 20, 30, 40])
  _state_file_says(tmp_path, 'model_checkpoint_path: "ckpt-20"\n'
                             'all_model_checkpoint_paths: "ckpt-10"\n'
                             'all_model_checkpoint_paths: "ckpt-25"\n'
                             'all_model_checkpoint_paths: "ckpt-20"\n')
  caplog.clear()
  assert restore_order(str(tmp_path)) == [
      str(tmp_path / f"ckpt-{step}") for step in (20, 10, 40, 30)]
  assert _said(caplog) == [f"The checkpoint state file lists {tmp_path / 'ckpt-25'}, whose files "
                           "are missing; skipping it."]


def test_a_rebuilt_state_file_dates_each_checkpoint_by_its_index_file(tmp_path):
  """CheckpointManager counts a listed checkpoint towards max_to_keep by its timestamp (here the
  index file's modification time, to the second as tf.io.gfile.stat gives it locally)."""
  _saved(tmp_path, [1.0, 2.0, 3.0])
  _state_file_says(tmp_path, "garbled")
  Checkpoints(str(tmp_path), max_to_keep=5, value=tf.Variable(0.0))
  state = tf.train.get_checkpoint_state(str(tmp_path))
  assert list(state.all_model_checkpoint_timestamps) == [
      float(os.stat(tmp_path / f"ckpt-{step}.index").st_mtime_ns // 10**9) for step in (1, 2, 3)]


def test_a_rebuilt_state_file_still_resumes_after_the_directory_moves(tmp_path, caplog):
  """It names the checkpoints relative to itself, as TensorFlow's CheckpointManager does."""
  _saved(tmp_path / "run", [1.0, 2.0, 3.0])
  _state_file_says(tmp_path / "run", "garbled")
  Checkpoints(str(tmp_path / "run"), max_to_keep=5, value=tf.Variable(0.0))
  shutil.move(tmp_path / "run", tmp_path / "moved")
  caplog.clear()
  assert _restored_value(tmp_path / "moved") == (str(tmp_path / "moved" / "ckpt-3"), 3.0)
  assert _said(caplog) == []  # Not rebuilt again: the moved state file is intact.


def test_a_rebuilt_state_file_counts_checkpoints_dated_ahead_of_the_clock(tmp_path):
  """Files copied from a machine whose clock runs ahead: max_to_keep still bounds them."""
  _saved(tmp_path, [1.0, 2.0, 3.0])
  ahead = os.path.getmtime(tmp_path / "ckpt-3.index") + 3600
  for index_file in glob.glob(str(tmp_path / "ckpt-*.index")):
    os.utime(index_file, (ahead, ahead))
  _state_file_says(tmp_path, "garbled")
  checkpoints = Checkpoints(str(tmp_path), max_to_keep=3, value=tf.Variable(0.0))
  checkpoints.save(4)
  checkpoints.save(5)
  assert sorted(os.path.basename(path) for path in glob.glob(str(tmp_path / "ckpt-*.index"))) == [
      "ckpt-3.index", "ckpt-4.index", "ckpt-5.index"]
