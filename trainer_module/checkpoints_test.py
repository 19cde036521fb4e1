"""Checkpoints: the newest intact one is restored, damaged ones are skipped, SIGTERM recorded."""
import glob
import os
import re
import signal

import pytest
import tensorflow as tf

from trainer_module.checkpoints import (Checkpoints, ConfigRecord, StopSignal, TrainingState,
                                        damage)


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


def test_leftovers_of_an_interrupted_save_are_removed(tmp_path):
  _saved(tmp_path, [1.0])
  os.makedirs(tmp_path / "ckpt-2_temp")
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
