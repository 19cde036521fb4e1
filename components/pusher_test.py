"""Pushing: numeric versions appear whole, and the serving model is never pushed twice."""
import concurrent.futures
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from components import pusher

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model(path, content=b"weights"):
  os.makedirs(os.path.join(path, "variables"), exist_ok=True)
  with open(os.path.join(path, "saved_model.pb"), "wb") as f:
    f.write(b"graph")
  with open(os.path.join(path, "variables", "variables.data"), "wb") as f:
    f.write(content)
  return path


def test_fingerprint_changes_with_any_byte_of_the_model(tmp_path):
  a = pusher.saved_model_fingerprint(_model(str(tmp_path / "a")))
  b = pusher.saved_model_fingerprint(_model(str(tmp_path / "b")))
  c = pusher.saved_model_fingerprint(_model(str(tmp_path / "c"), content=b"weightz"))
  assert a == b != c


def test_push_writes_a_numeric_version_with_its_fingerprint(tmp_path):
  model = _model(str(tmp_path / "model"))
  base = str(tmp_path / "serving")
  version_dir = pusher.push_version(model, base, pusher.saved_model_fingerprint(model))
  assert os.path.basename(version_dir).isdigit()
  assert os.listdir(base) == [os.path.basename(version_dir)]
  assert pusher.pushed_fingerprint(version_dir) == pusher.saved_model_fingerprint(model)
  with open(os.path.join(version_dir, "saved_model.pb"), "rb") as f:
    assert f.read() == b"graph"
  with open(os.path.join(version_dir, pusher.PUSH_INFO_PATH)) as f:
    assert json.load(f)["source"] == model


def test_versions_increase_even_within_one_second_and_earlier_ones_stay(tmp_path):
  model = _model(str(tmp_path / "model"))
  base = str(tmp_path / "serving")
  first = pusher.push_version(model, base, pusher.saved_model_fingerprint(model))
  second = pusher.push_version(model, base, pusher.saved_model_fingerprint(model))
  assert int(os.path.basename(second)) > int(os.path.basename(first))
  assert pusher.serving_versions(base) == sorted(int(os.path.basename(d)) for d in (first, second))


def test_a_staging_directory_left_by_a_killed_push_is_invisible_and_replaced(tmp_path):
  model = _model(str(tmp_path / "model"))
  base = tmp_path / "serving"
  stale = base / ".incomplete-99999999999"
  stale.mkdir(parents=True)
  (stale / "half-written").write_bytes(b"")
  assert pusher.serving_versions(str(base)) == []
  pusher.push_version(model, str(base), pusher.saved_model_fingerprint(model))
  assert len(pusher.serving_versions(str(base))) == 1


# Pushes `model` to `base` with a copy that pauses after three files (a slow disk), telling
# the parent through `marker`; the parent then kills it with SIGKILL.
_PUSH_THAT_STALLS = """
import sys, time
from tfx.dsl.io import fileio
from components import pusher
model, base, marker = sys.argv[1:]
copy, copied = fileio.copy, []
def stalling_copy(src, dst, overwrite=False):
  copy(src, dst, overwrite)
  copied.append(dst)
  if len(copied) == 3:
    open(marker, "w").close()
    time.sleep(600)
fileio.copy = stalling_copy
pusher.push_version(model, base, pusher.saved_model_fingerprint(model))
"""


def _tree(path):
  """{relative path: bytes} of every file under path."""
  result = {}
  for root, _, files in os.walk(path):
    for name in files:
      with open(os.path.join(root, name), "rb") as f:
        result[os.path.relpath(os.path.join(root, name), path)] = f.read()
  return result


def test_a_push_killed_mid_copy_leaves_no_partial_version_and_the_next_push_cleans_up(tmp_path):
  first_model = _model(str(tmp_path / "first"))
  second_model = _model(str(tmp_path / "second"), content=b"new weights")
  for i in range(10):  # Enough files that the kill lands mid-copy.
    (tmp_path / "second" / "variables" / f"shard-{i}").write_bytes(bytes([i]) * 1000)
  base = str(tmp_path / "serving")
  first = pusher.push_version(first_model, base, pusher.saved_model_fingerprint(first_model))
  before = _tree(base)

  marker = tmp_path / "mid-copy"
  child = subprocess.Popen([sys.executable, "-c", _PUSH_THAT_STALLS, second_model, base,
                            str(marker)], cwd=REPO)
  deadline = time.time() + 120
  while not marker.exists():
    assert child.poll() is None, "the push ended before it could be killed"
    assert time.time() < deadline, "the push never reached its third file"
    time.sleep(0.05)
  child.send_signal(signal.SIGKILL)
  assert child.wait(timeout=60) == -signal.SIGKILL

  staging = [n for n in os.listdir(base) if n.startswith(".incomplete-")]
  assert len(staging) == 1 and len(_tree(os.path.join(base, staging[0]))) == 3, "killed mid-copy"
  assert pusher.serving_versions(base) == [int(os.path.basename(first))]
  assert {k: v for k, v in _tree(base).items() if not k.startswith(".incomplete-")} == before

  second = pusher.push_version(second_model, base, pusher.saved_model_fingerprint(second_model))
  assert sorted(os.listdir(base)) == sorted([os.path.basename(first), os.path.basename(second)])
  assert _tree(second) == {**_tree(second_model),
                           pusher.PUSH_INFO_PATH: _tree(second)[pusher.PUSH_INFO_PATH]}
  assert {k: v for k, v in _tree(base).items() if k.startswith(os.path.basename(first))} == before


def _push_after_barrier(barrier, model, bases, fingerprint, collisions):
  """Pushes into each base with the other process: both choose a version number from the same
  listing before either publishes (the barrier again, after the first choice), so they collide
  on it; counts the renames refused because the other took the number first."""
  next_version, rename_if_absent = pusher._next_version, pusher._rename_if_absent
  first_choice = [True]

  def next_version_chosen_together(base_directory, taken):
    version = next_version(base_directory, taken)
    if first_choice[0]:
      first_choice[0] = False
      barrier.wait(timeout=60)
    return version

  def counting_rename(staging_dir, final_dir):
    renamed = rename_if_absent(staging_dir, final_dir)
    if not renamed:
      with collisions.get_lock():
        collisions.value += 1
    return renamed

  pusher._next_version = next_version_chosen_together  # This forked process's module only.
  pusher._rename_if_absent = counting_rename
  for base in bases:
    first_choice[0] = True
    barrier.wait(timeout=60)  # A crashed partner breaks the barrier instead of hanging it.
    pusher.push_version(model, base, fingerprint)


def test_two_pushes_released_together_never_publish_a_mixed_version(tmp_path):
  """Two processes push different models into the same base directory at the same instant,
  twenty times over: they collide on a version number, and every published version is exactly
  one model with its own push_info."""
  models = {}
  for name in ("a", "b"):
    path = _model(str(tmp_path / name), content=name.encode() * 100)
    for i in range(20):  # Many files, so that two copies interleave.
      (tmp_path / name / "variables" / f"shard-{i}").write_bytes(name.encode() * (i + 1) * 500)
    models[name] = (path, pusher.saved_model_fingerprint(path))
  bases = [str(tmp_path / "serving" / str(trial)) for trial in range(20)]
  context = multiprocessing.get_context("fork")
  barrier, collisions = context.Barrier(2), context.Value("i", 0)
  workers = [context.Process(target=_push_after_barrier,
                             args=(barrier, path, bases, fingerprint, collisions))
             for path, fingerprint in models.values()]
  for worker in workers:
    worker.start()
  for worker in workers:
    worker.join(timeout=600)
  assert [worker.exitcode for worker in workers] == [0, 0]
  assert collisions.value, "the pushes never raced for one number: the test proves nothing"

  for base in bases:
    versions = pusher.serving_versions(base)
    assert len(versions) == 2 and sorted(os.listdir(base)) == sorted(map(str, versions))
    pushed = set()
    for version in versions:
      version_dir = os.path.join(base, str(version))
      tree = _tree(version_dir)
      info = json.loads(tree.pop(pusher.PUSH_INFO_PATH))
      name = os.path.basename(info["source"])
      assert tree == _tree(models[name][0]), f"{version_dir} mixes the two models"
      assert info["model_fingerprint"] == models[name][1] == pusher.pushed_fingerprint(
          version_dir)
      pushed.add(name)
    assert pushed == {"a", "b"}


def test_a_published_copy_that_differs_from_the_source_is_withdrawn(tmp_path, monkeypatch):
  model = _model(str(tmp_path / "model"))
  base = str(tmp_path / "serving")
  copy_dir = pusher.io_utils.copy_dir

  def copy_that_damages(src, dst):
    copy_dir(src, dst)
    with open(os.path.join(dst, "saved_model.pb"), "wb") as f:
      f.write(b"damaged in transit")

  monkeypatch.setattr(pusher.io_utils, "copy_dir", copy_that_damages)
  monkeypatch.chdir(tmp_path)
  with pytest.raises(RuntimeError, match=f"does not match the model {model} "):
    pusher.push_version(model, base, pusher.saved_model_fingerprint(model))
  assert pusher.serving_versions(base) == []
  # Withdrawn aside within the serving directory, as an entry TF Serving never loads.
  (withdrawn,) = os.listdir(base)
  assert withdrawn.startswith(".incomplete-bad-")
  assert sorted(os.listdir(tmp_path)) == ["model", "serving"]


def test_a_staging_directory_of_a_live_push_is_left_alone(tmp_path):
  base = tmp_path / "serving"
  live = base / f".incomplete-{socket.gethostname()}-{os.getpid()}-0123abcd"
  dead = base / f".incomplete-{socket.gethostname()}-{2**22 + 1}-0123abcd"
  # Another host's push (a shared filesystem): its pid means nothing here, so it may be live.
  other_host = base / f".incomplete-not-{socket.gethostname()}-{2**22 + 1}-0123abcd"
  for staging in (live, dead, other_host):
    staging.mkdir(parents=True)
  pusher.remove_stale_staging_dirs(str(base))
  assert live.exists() and not dead.exists()
  assert other_host.exists()


def test_checking_a_push_process_is_alive_sends_it_no_signal(tmp_path):
  """A live push's process (here one that exits on any signal it can catch) is probed, not
  signalled, and its staging directory is kept."""
  child = subprocess.Popen([sys.executable, "-c", (
      "import signal, sys, time\n"
      "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):\n"
      "  signal.signal(s, lambda *_: sys.exit(3))\n"
      "print('ready', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
  try:
    assert child.stdout.readline().strip() == "ready"
    staging = tmp_path / f".incomplete-{socket.gethostname()}-{child.pid}-0123abcd"
    staging.mkdir()
    pusher.remove_stale_staging_dirs(str(tmp_path))
    time.sleep(0.2)
    assert child.poll() is None and staging.exists()
  finally:
    child.kill()
    child.wait()


def test_a_staging_directory_of_another_users_live_push_is_left_alone(tmp_path, monkeypatch):
  def kill(pid, sig):
    raise PermissionError(1, "Operation not permitted")  # Alive, not ours to signal.
  monkeypatch.setattr(pusher.os, "kill", kill)
  staging = tmp_path / f".incomplete-{socket.gethostname()}-{2**22 + 1}-0123abcd"
  staging.mkdir()
  pusher.remove_stale_staging_dirs(str(tmp_path))
  assert staging.exists()


# Object storage (s3:// on the moto server): versions claimed with a conditional create.

def _s3_tree(s3_server, bucket, prefix):
  """{path relative to prefix: bytes} of every object under the prefix."""
  client = s3_server.client()
  return {key[len(prefix):]: client.get_object(Bucket=bucket, Key=key)["Body"].read()
          for key, _ in s3_server.keys(bucket, prefix)}


def _two_models(tmp_path):
  models = {}
  for name in ("a", "b"):
    path = _model(str(tmp_path / name), content=name.encode() * 100)
    for i in range(6):
      (tmp_path / name / "variables" / f"shard-{i}").write_bytes(name.encode() * (i + 1) * 100)
    models[name] = (path, pusher.saved_model_fingerprint(path))
  return models


def test_two_pushes_to_s3_released_together_claim_distinct_versions_and_never_mix(
    s3_server, s3, tmp_path, monkeypatch):
  """Two pushes of different models into one s3:// base directory at the same instant, six
  times over: they collide on a version number, the loser of the claim takes the next one, and
  every published version is exactly one model, its push_info and its claim."""
  root, bucket = s3
  models = _two_models(tmp_path)
  refused = []
  create_if_absent = pusher.object_storage.create_if_absent

  def counting_create(uri, content):
    created = create_if_absent(uri, content)
    if not created:
      refused.append(uri)
    return created

  monkeypatch.setattr(pusher.object_storage, "create_if_absent", counting_create)
  barrier = threading.Barrier(2)

  def push(path, fingerprint, base):
    barrier.wait(timeout=60)  # A crashed partner breaks the barrier instead of hanging it.
    return pusher.push_version(path, base, fingerprint, run_id=f"run-{os.path.basename(path)}")

  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    for trial in range(6):
      base = f"{root}/serving/{trial}"
      published = list(pool.map(lambda model: push(*model, base), models.values()))
      versions = pusher.serving_versions(base)
      assert sorted(published) == [f"{base}/{version}" for version in versions]
      assert len(versions) == 2 and pusher.claimed_versions(base) == versions
      pushed = set()
      for version in versions:
        tree = _s3_tree(s3_server, bucket, f"serving/{trial}/{version}/")
        info = json.loads(tree.pop(pusher.PUSH_INFO_PATH))
        name = os.path.basename(info["source"])
        assert tree == _tree(models[name][0]), f"trial {trial}: version {version} is mixed"
        assert info["model_fingerprint"] == models[name][1] == pusher.pushed_fingerprint(
            f"{base}/{version}")
        claim = json.loads(_s3_tree(s3_server, bucket, f"serving/{trial}/.version-claims/")[
            f"{version}.json"])
        assert (claim["version"], claim["model_fingerprint"], claim["run_id"]) == (
            version, models[name][1], f"run-{name}")
        pushed.add(name)
      assert pushed == {"a", "b"}
  assert refused, "the pushes never raced for one number: the test proves nothing"


def test_on_s3_saved_model_pb_is_written_last_so_a_poller_never_loads_a_partial_version(
    s3_server, s3, tmp_path, monkeypatch):
  root, bucket = s3
  path, fingerprint = _two_models(tmp_path)["a"]
  copy, seen_before_graph = pusher.fileio.copy, []

  def watching_copy(src, dst, overwrite=False):
    if dst.endswith("/saved_model.pb"):
      seen_before_graph.append(sorted(_s3_tree(s3_server, bucket, "serving/").keys()))
    copy(src, dst, overwrite)

  monkeypatch.setattr(pusher.fileio, "copy", watching_copy)
  version_dir = pusher.push_version(path, f"{root}/serving", fingerprint)
  version = os.path.basename(version_dir)
  expected = sorted([f"{version}/{name}" for name in _tree(path) if name != "saved_model.pb"]
                    + [f"{version}/{pusher.PUSH_INFO_PATH}", f".version-claims/{version}.json"])
  assert seen_before_graph == [expected]


def test_a_push_to_s3_that_dies_mid_copy_leaves_an_unloadable_version_and_its_number_taken(
    s3_server, s3, tmp_path, monkeypatch):
  root, bucket = s3
  models = _two_models(tmp_path)
  base = f"{root}/serving"
  copy, copied = pusher.fileio.copy, []

  def dying_copy(src, dst, overwrite=False):
    if len(copied) == 3:
      raise ConnectionError("pod evicted")
    copy(src, dst, overwrite)
    copied.append(dst)

  monkeypatch.setattr(pusher.fileio, "copy", dying_copy)
  with pytest.raises(ConnectionError):
    pusher.push_version(models["a"][0], base, models["a"][1])
  monkeypatch.setattr(pusher.fileio, "copy", copy)
  [dead] = pusher.serving_versions(base)
  assert not pusher.fileio.exists(f"{base}/{dead}/saved_model.pb")
  assert pusher.pushed_fingerprint(f"{base}/{dead}") is None  # Never "already serving".

  second = pusher.push_version(models["b"][0], base, models["b"][1])
  assert int(os.path.basename(second)) > dead
  assert pusher.claimed_versions(base) == pusher.serving_versions(base)
  assert pusher.pushed_fingerprint(second) == models["b"][1]


def test_a_copy_on_s3_that_differs_from_the_source_is_withdrawn_graph_first(
    s3_server, s3, tmp_path, monkeypatch):
  root, bucket = s3
  path, fingerprint = _two_models(tmp_path)["a"]
  copy, removed = pusher.fileio.copy, []

  def damaging_copy(src, dst, overwrite=False):
    copy(src, dst, overwrite)
    if dst.endswith("shard-0"):
      with pusher.fileio.open(dst, "wb") as f:
        f.write(b"damaged in transit")

  remove = pusher.fileio.remove
  monkeypatch.setattr(pusher.fileio, "copy", damaging_copy)
  monkeypatch.setattr(pusher.fileio, "remove", lambda p: (removed.append(p), remove(p)))
  with pytest.raises(RuntimeError, match="does not match the model"):
    pusher.push_version(path, f"{root}/serving", fingerprint)
  assert removed[0].endswith("/saved_model.pb")
  assert [key for key, _ in s3_server.keys(bucket, "serving/")] == [
      f"serving/.version-claims/{pusher.claimed_versions(f'{root}/serving')[0]}.json"]


def _push_blessed(tmp_path, model_dir, base, name, blessed=True, infra_blessing=None,
                  drift=None, context=None):
  """Runs the Pusher's executor on a blessed (or not) Trainer output holding model_dir's
  files (and the DriftCheck's report, `drift`, when given)."""
  from tfx.proto import pusher_pb2
  from tfx.types import standard_artifacts
  from tfx.utils import proto_utils
  model, blessing, pushed = (standard_artifacts.Model(), standard_artifacts.ModelBlessing(),
                             standard_artifacts.PushedModel())
  model.uri = str(tmp_path / name / "model")
  shutil.copytree(model_dir, os.path.join(model.uri, "Format-Serving"))
  blessing.uri, pushed.uri = str(tmp_path / name / "blessing"), str(tmp_path / name / "pushed")
  blessing.set_int_custom_property("blessed", int(blessed))
  destination = pusher_pb2.PushDestination(
      filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base))
  inputs = {"model": [model], "model_blessing": [blessing]}
  if infra_blessing is not None:
    inputs["infra_blessing"] = [infra_blessing]
  if drift is not None:
    inputs[pusher.DRIFT_KEY] = [drift]
  pusher.VersionedPusherExecutor(context).Do(
      inputs, {"pushed_model": [pushed]},
      {"push_destination": proto_utils.proto_to_json(destination)})
  return pushed


@pytest.mark.parametrize("number", [int, float], ids=["local", "kubeflow-doubles"])
def test_the_push_record_names_the_span_version_and_window_the_model_was_trained_on(
    tmp_path, number):
  """The served-model check puts them on its infra blessing (ints locally; doubles as KFP's
  MLMD hands custom properties back); the Pusher keeps them with the version."""
  from tfx.types import standard_artifacts
  from components import serving_versions
  infra = standard_artifacts.InfraBlessing()
  infra.uri = str(tmp_path / "infra")
  infra.set_int_custom_property("blessed", 1)
  setter = (infra.set_int_custom_property if number is int else infra.set_float_custom_property)
  setter(pusher.TRAINED_SPAN_KEY, number(20261201))
  setter(pusher.TRAINED_VERSION_KEY, number(2))
  infra.set_string_custom_property(pusher.TRAIN_WINDOW_KEY, "20261130,20261201")
  infra.set_string_custom_property(pusher.TRAINED_FINGERPRINT_KEY, "split:train,num_files:3")
  pushed = _push_blessed(tmp_path, _model(str(tmp_path / "source")), str(tmp_path / "serving"),
                         "first", infra_blessing=infra)
  version_dir = pushed.get_string_custom_property("pushed_destination")
  assert serving_versions.recorded_training_data(version_dir) == {
      "span": 20261201, "version": 2, "train_window": "20261130,20261201",
      "input_fingerprint": "split:train,num_files:3"}
  assert pusher.version_problem(version_dir) is None  # The record is outside the fingerprint.


def test_a_span_without_a_version_is_recorded_as_version_0(tmp_path):
  """ExampleGen's first version of a span is 0: a blessing naming only the span says so."""
  from tfx.types import standard_artifacts
  from components import serving_versions
  infra = standard_artifacts.InfraBlessing()
  infra.uri = str(tmp_path / "infra")
  infra.set_int_custom_property("blessed", 1)
  infra.set_int_custom_property(pusher.TRAINED_SPAN_KEY, 20261201)
  pushed = _push_blessed(tmp_path, _model(str(tmp_path / "source")), str(tmp_path / "serving"),
                         "first", infra_blessing=infra)
  assert serving_versions.recorded_training_data(
      pushed.get_string_custom_property("pushed_destination")) == {"span": 20261201, "version": 0}


def test_a_push_without_the_checks_record_of_the_data_records_none(tmp_path):
  from components import serving_versions
  pushed = _push_blessed(tmp_path, _model(str(tmp_path / "source")), str(tmp_path / "serving"),
                         "first")
  version_dir = pushed.get_string_custom_property("pushed_destination")
  assert serving_versions.recorded_training_data(version_dir) is None
  assert pusher.pushed_fingerprint(version_dir)


def test_a_damaged_latest_copy_of_the_model_does_not_count_as_already_serving(tmp_path):
  model = _model(str(tmp_path / "source"))
  base = str(tmp_path / "serving")
  first = _push_blessed(tmp_path, model, base, "first")
  assert first.get_int_custom_property("pushed") == 1
  assert _push_blessed(tmp_path, model, base, "again").get_string_custom_property(
      pusher.ALREADY_SERVING_KEY)  # Intact: not pushed twice.
  latest = os.path.join(base, str(pusher.serving_versions(base)[-1]))
  with open(os.path.join(latest, "variables", "variables.data"), "r+b") as f:
    f.truncate(2)  # Its push record still names the model's fingerprint.
  repaired = _push_blessed(tmp_path, model, base, "repair")
  assert repaired.get_int_custom_property("pushed") == 1
  newest = os.path.join(base, str(pusher.serving_versions(base)[-1]))
  assert newest != latest and pusher.version_problem(newest) is None


def test_the_pushed_model_records_its_version_and_the_log_says_what_was_pushed(tmp_path, caplog):
  caplog.set_level("INFO", logger=pusher.__name__)
  model, base = _model(str(tmp_path / "source")), str(tmp_path / "serving")
  first = _push_blessed(tmp_path, model, base, "first")
  (version,) = pusher.serving_versions(base)
  version_dir = os.path.join(base, str(version))
  assert first.get_string_custom_property("pushed_version") == str(version)
  assert first.get_string_custom_property("pushed_destination") == version_dir
  assert f"Pushed the model to {version_dir}." in caplog.messages
  _push_blessed(tmp_path, model, base, "again")
  assert (f"The blessed model already serves as {version_dir}; nothing pushed."
          in caplog.messages)


def test_a_model_the_gate_did_not_bless_is_not_pushed(tmp_path):
  base = str(tmp_path / "serving")
  pushed = _push_blessed(tmp_path, _model(str(tmp_path / "source")), base, "refused",
                         blessed=False)
  assert pushed.get_int_custom_property("pushed") == 0
  assert not os.path.exists(base) or pusher.serving_versions(base) == []


def _drift_report(path, blocks_push, moved, baseline=True):
  """A DriftCheck output: its drift.json, and (with `baseline`) the baseline of this run's
  data that the Pusher keeps with the version."""
  from components import drift_baseline
  report = drift_baseline.DriftReport()
  report.uri = path
  os.makedirs(path)
  with open(os.path.join(path, drift_baseline.RESULT_FILE), "w") as f:
    json.dump({drift_baseline.BLOCKS_PUSH_KEY: blocks_push, "moved": moved}, f)
  if baseline:
    os.makedirs(os.path.join(path, drift_baseline.OUTPUT_DIR))
    for name in drift_baseline.FILES:
      with open(os.path.join(path, drift_baseline.OUTPUT_DIR, name), "w") as f:
        f.write(f"the {name} of this run's data")
  return report


def test_a_drift_that_blocks_the_push_refuses_it_and_says_what_moved(tmp_path, caplog):
  """--block_on_drift: the DriftCheck's verdict stops a blessed model, and the pushed_model
  artifact and the log name each moved feature."""
  caplog.set_level("WARNING", logger=pusher.__name__)
  base = str(tmp_path / "serving")
  moved = ["mean brightness moved", "label share moved"]
  pushed = _push_blessed(tmp_path, _model(str(tmp_path / "source")), base, "refused",
                         drift=_drift_report(str(tmp_path / "drift"), 1, moved))
  assert pushed.get_int_custom_property("pushed") == 0
  assert json.loads(pushed.get_string_custom_property(pusher.REFUSED_FOR_DRIFT_KEY)) == moved
  assert not os.path.exists(base) or pusher.serving_versions(base) == []
  assert caplog.messages == ["Not pushed: the data drifted from production's "
                             "(--block_on_drift): mean brightness moved; label share moved"]


@pytest.mark.parametrize("with_baseline", [True, False], ids=["baseline", "no-baseline"])
def test_a_drift_that_does_not_block_pushes_the_version_with_the_baseline_of_its_data(
    tmp_path, with_baseline):
  from components import drift_baseline
  pushed = _push_blessed(tmp_path, _model(str(tmp_path / "source")), str(tmp_path / "serving"),
                         "pushed", drift=_drift_report(str(tmp_path / "drift"), 0,
                                                       ["mean brightness moved"], with_baseline))
  assert pushed.get_int_custom_property("pushed") == 1
  assert not pushed.has_custom_property(pusher.REFUSED_FOR_DRIFT_KEY)
  version_dir = pushed.get_string_custom_property("pushed_destination")
  kept = drift_baseline.baseline_dir(version_dir)
  if with_baseline:
    assert sorted(os.listdir(kept)) == sorted(drift_baseline.FILES)
    with open(os.path.join(kept, drift_baseline.INFO_FILE)) as f:
      assert f.read() == f"the {drift_baseline.INFO_FILE} of this run's data"
  else:
    assert not os.path.exists(kept)
  assert pusher.version_problem(version_dir) is None  # The baseline is outside the fingerprint.


def test_the_push_names_the_pipeline_run_it_belongs_to(tmp_path, monkeypatch):
  """An object-store push records the run in its version claim: the executor hands the run id
  of its context to push_version (None outside a pipeline run)."""
  from tfx.dsl.components.base import base_executor
  calls = []
  push_version = pusher.push_version
  monkeypatch.setattr(pusher, "push_version",
                      lambda *args: calls.append(args[3]) or push_version(*args))
  model, base = _model(str(tmp_path / "source")), str(tmp_path / "serving")
  _push_blessed(tmp_path, model, base, "in-a-run",
                context=base_executor.BaseExecutor.Context(pipeline_run_id="run-20261203"))
  _push_blessed(tmp_path, _model(str(tmp_path / "other"), b"other"), base, "alone")
  assert calls == ["run-20261203", None]


def test_the_executor_refuses_a_destination_other_than_a_filesystem(tmp_path):
  from tfx.proto import pusher_pb2
  from tfx.types import standard_artifacts
  from tfx.utils import proto_utils
  model, blessing, pushed = (standard_artifacts.Model(), standard_artifacts.ModelBlessing(),
                             standard_artifacts.PushedModel())
  model.uri, blessing.uri, pushed.uri = (str(tmp_path / "model"), str(tmp_path / "blessing"),
                                         str(tmp_path / "pushed"))
  shutil.copytree(_model(str(tmp_path / "source")), os.path.join(model.uri, "Format-Serving"))
  blessing.set_int_custom_property("blessed", 1)
  with pytest.raises(ValueError, match="^VersionedPusherExecutor pushes to a filesystem "
                     "destination only.$"):
    pusher.VersionedPusherExecutor().Do(
        {"model": [model], "model_blessing": [blessing]}, {"pushed_model": [pushed]},
        {"push_destination": proto_utils.proto_to_json(pusher_pb2.PushDestination())})


@pytest.mark.parametrize("name", [".incomplete-0123abcd", ".incomplete-host-12x-0123abcd",
                                  ".incomplete-host-\u0661\u0662-0123abcd"],
                         ids=["older-scheme", "pid-not-a-number", "pid-in-arabic-digits"])
def test_a_staging_directory_not_named_by_a_push_of_this_code_is_removed(tmp_path, name):
  """Only `.incomplete-<host>-<ASCII pid>-<id>` names a push that may still be live."""
  (tmp_path / name).mkdir()
  pusher.remove_stale_staging_dirs(str(tmp_path))
  assert not (tmp_path / name).exists()


# Entry names TF Serving reads as versions (safe_strto64) that Python's int() reads otherwise,
# and the version the next push must exceed.
@pytest.mark.parametrize("entry, newest_served", [
    ("99999999999999999999", None),  # Beyond int64: no version to TF Serving.
    ("9999999999 ", 9999999999),  # Surrounding white space is skipped.
    ("\t0009999999999", 9999999999),
    ("²", None),  # A Unicode digit: isdigit() is true, but no version.
], ids=["beyond-int64", "trailing-space", "tab-and-zeros", "unicode-digit"])
def test_the_next_version_follows_the_versions_tf_serving_reads(tmp_path, entry, newest_served):
  model = _model(str(tmp_path / "model"))
  base = tmp_path / "serving"
  (base / entry).mkdir(parents=True)
  version_dir = pusher.push_version(model, str(base), pusher.saved_model_fingerprint(model))
  version = int(os.path.basename(version_dir))
  assert str(version) == os.path.basename(version_dir)  # The canonical name.
  assert version <= 2**63 - 1  # One TF Serving can parse, so it is served.
  assert newest_served is None or version > newest_served
  assert version >= int(time.time()) - 5


def test_a_version_at_the_int64_limit_refuses_the_push_naming_the_entry(tmp_path):
  model = _model(str(tmp_path / "model"))
  base = tmp_path / "serving"
  (base / "9223372036854775807").mkdir(parents=True)
  with pytest.raises(pusher.UnusableServingDirectory) as error:
    pusher.push_version(model, str(base), pusher.saved_model_fingerprint(model))
  assert str(error.value) == (
      f"Cannot push to {base}: it holds {base}/9223372036854775807, version 9223372036854775807, "
      "the largest TF Serving can parse (int64), so no later version can be pushed; move that "
      "entry out of the serving directory.")
  assert os.listdir(base) == ["9223372036854775807"]  # No staging copy left behind.


def test_the_largest_version_tf_serving_parses_is_still_pushed(tmp_path):
  model = _model(str(tmp_path / "model"))
  base = tmp_path / "serving"
  (base / str(2**63 - 2)).mkdir(parents=True)
  version_dir = pusher.push_version(model, str(base), pusher.saved_model_fingerprint(model))
  assert os.path.basename(version_dir) == str(2**63 - 1)


def test_the_next_version_is_one_past_a_claimed_number_ahead_of_the_clock(tmp_path):
  """An object store's claims can run ahead of the time: the next number is the one after."""
  ahead = int(time.time()) + 10**6
  assert pusher._next_version(str(tmp_path), [ahead - 5, ahead]) == ahead + 1
  with pytest.raises(pusher.UnusableServingDirectory) as error:
    pusher._next_version(str(tmp_path), [2**63 - 1])
  assert str(error.value) == (f"Cannot push to {tmp_path}: version 9223372036854775807 is "
                              "claimed, the largest TF Serving can parse (int64).")


def _write_push_record(version_dir, record):
  path = os.path.join(version_dir, pusher.PUSH_INFO_PATH)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(record, f)


def _version_made_unpublishable(version_dir, defect):
  if defect == "symbolic link":
    os.symlink(_model(version_dir + "-target"), version_dir)
  elif defect == "file":
    open(version_dir, "wb").close()
  else:
    _model(version_dir)
    _write_push_record(version_dir, {"model_fingerprint": pusher.saved_model_fingerprint(
        version_dir, exclude=pusher.NOT_OF_THE_MODEL)})
    if defect == "no saved_model.pb":
      os.remove(os.path.join(version_dir, "saved_model.pb"))
    elif defect == "no variables":
      shutil.rmtree(os.path.join(version_dir, "variables"))
    elif defect == "no push record":
      os.remove(os.path.join(version_dir, pusher.PUSH_INFO_PATH))
    elif defect == "altered":
      with open(os.path.join(version_dir, "variables", "variables.data"), "ab") as f:
        f.write(b"!")


@pytest.mark.parametrize("defect, problem", [
    ("symbolic link", "a symbolic link, not a version the Pusher published"),
    ("file", "a file, not a version directory"),
    ("no saved_model.pb", "no saved_model.pb (TF Serving cannot load it)"),
    ("no variables", "no variables/ directory"),
    ("no push record", f"no readable push record ({pusher.PUSH_INFO_PATH}): not pushed by this "
     "pipeline"),
    ("altered", "its files do not match the fingerprint of its push record (truncated or "
     "altered)"),
    ("none", None),
])
def test_each_way_a_version_is_not_a_published_copy_is_named(tmp_path, defect, problem):
  """What production-model lookup and the run's summary print for a version they skip."""
  version_dir = str(tmp_path / "1")
  _version_made_unpublishable(version_dir, defect)
  assert pusher.version_problem(version_dir) == problem


def test_a_number_already_taken_is_not_renamed_onto_and_the_staged_copy_stays(tmp_path):
  staging, final = _model(str(tmp_path / "staging")), _model(str(tmp_path / "1"))
  assert pusher._rename_if_absent(staging, final) is False
  assert os.path.exists(os.path.join(staging, "saved_model.pb"))


def test_a_number_taken_between_the_check_and_the_rename_is_a_lost_race_not_an_error(
    tmp_path, monkeypatch):
  staging, final = _model(str(tmp_path / "staging")), _model(str(tmp_path / "1"), b"theirs")
  exists = pusher.fileio.exists
  checked = []
  # The other push renames right after this one's check: the check sees no version yet.
  monkeypatch.setattr(pusher.fileio, "exists",
                      lambda path: exists(path) if checked else checked.append(path) or False)
  assert pusher._rename_if_absent(staging, final) is False
  assert checked == [final]
  with open(os.path.join(final, "variables", "variables.data"), "rb") as f:
    assert f.read() == b"theirs"  # The winner's version, untouched.


def test_a_rename_that_fails_for_another_reason_raises(tmp_path, monkeypatch):
  staging, final = _model(str(tmp_path / "staging")), str(tmp_path / "1")

  def failing_rename(source, target, overwrite=False):
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(pusher.fileio, "rename", failing_rename)
  with pytest.raises(OSError, match="No space left"):
    pusher._rename_if_absent(staging, final)


def test_the_pusher_component_pushes_to_its_directory_and_reads_the_drift_check():
  from tfx import types
  from tfx.types import standard_artifacts
  from components import drift_baseline
  channels = {name: types.Channel(type=artifact_type) for name, artifact_type in (
      ("model", standard_artifacts.Model), ("model_blessing", standard_artifacts.ModelBlessing),
      ("infra_blessing", standard_artifacts.InfraBlessing),
      ("drift", drift_baseline.DriftReport))}
  component = pusher.VersionedPusher(base_directory="/serving/wrn", **channels)
  destination = json.loads(component.exec_properties["push_destination"])  # TFX keeps JSON.
  assert destination == {"filesystem": {"base_directory": "/serving/wrn"}}
  assert all(component.inputs[name] is channel for name, channel in channels.items())
  assert component.outputs["pushed_model"].type == standard_artifacts.PushedModel
  assert "drift" not in pusher.VersionedPusher(
      base_directory="/serving/wrn", **{k: v for k, v in channels.items() if k != "drift"}).inputs


def test_a_push_to_an_object_store_hands_every_argument_to_the_object_store_push(monkeypatch):
  handed = []
  monkeypatch.setattr(pusher, "serving_directory_problem", lambda base: None)
  monkeypatch.setattr(pusher, "_push_to_object_store", lambda *args: handed.append(args) or "v")
  trained_on, arguments = {"span": 3}, ("/model", "s3://bucket/serving", "fingerprint")
  assert pusher.push_version(*arguments, run_id="run-1", trained_on=trained_on,
                             baseline_dir="/baseline") == "v"
  assert handed == [(*arguments, "run-1", trained_on, "/baseline")]


@pytest.mark.parametrize("record, with_graph", [
    ({"model_fingerprint": "abc"}, False), ({"model_fingerprint": 42}, True)],
    ids=["no-saved-model-pb", "fingerprint-not-a-string"])
def test_a_version_without_its_graph_or_a_readable_fingerprint_has_none(tmp_path, record,
                                                                        with_graph):
  version_dir = _model(str(tmp_path / "1"))
  if not with_graph:
    os.remove(os.path.join(version_dir, "saved_model.pb"))
  _write_push_record(version_dir, record)
  assert pusher.pushed_fingerprint(version_dir) is None


def test_a_whole_copy_whose_record_names_another_model_is_withdrawn(tmp_path):
  """A complete, self-consistent version that is not this push's model (its record names
  another fingerprint) is withdrawn like a damaged one."""
  model = _model(str(tmp_path / "model"))
  version_dir = pusher.push_version(model, str(tmp_path / "serving"),
                                    pusher.saved_model_fingerprint(model))
  withdrawn = []
  with pytest.raises(RuntimeError) as error:
    pusher._verify_published(model, version_dir, "another", lambda: withdrawn.append(True))
  assert withdrawn == [True]
  assert str(error.value) == (
      f"The copy published as {version_dir} does not match the model {model} (its push record "
      "does not name the fingerprint another of the model); it was withdrawn.")


def test_the_fingerprint_leaves_out_only_the_excluded_files(tmp_path):
  """A file beside an excluded one still counts: the push record is left out, not its folder."""
  model = _model(str(tmp_path / "model"))
  extra = os.path.join(model, "assets.extra")
  os.makedirs(extra)
  for name in ("a_record.json", "z_labels.txt"):
    with open(os.path.join(extra, name), "w") as f:
      f.write("first")
  before = pusher.saved_model_fingerprint(model, exclude=("assets.extra/a_record.json",))
  with open(os.path.join(extra, "a_record.json"), "w") as f:
    f.write("changed")
  assert pusher.saved_model_fingerprint(model, exclude=("assets.extra/a_record.json",)) == before
  with open(os.path.join(extra, "z_labels.txt"), "w") as f:
    f.write("changed")
  assert pusher.saved_model_fingerprint(model, exclude=("assets.extra/a_record.json",)) != before
