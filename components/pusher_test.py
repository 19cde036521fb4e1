"""Pushing: numeric versions appear whole, and the serving model is never pushed twice."""
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
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


def _push_after_barrier(barrier, model, bases, fingerprint):
  for base in bases:
    barrier.wait(timeout=60)  # A crashed partner breaks the barrier instead of hanging it.
    pusher.push_version(model, base, fingerprint)


def test_two_pushes_released_together_never_publish_a_mixed_version(tmp_path):
  """Two processes push different models into the same base directory at the same instant,
  twenty times over: every published version is exactly one model with its own push_info."""
  models = {}
  for name in ("a", "b"):
    path = _model(str(tmp_path / name), content=name.encode() * 100)
    for i in range(20):  # Many files, so that two copies interleave.
      (tmp_path / name / "variables" / f"shard-{i}").write_bytes(name.encode() * (i + 1) * 500)
    models[name] = (path, pusher.saved_model_fingerprint(path))
  bases = [str(tmp_path / "serving" / str(trial)) for trial in range(20)]
  context = multiprocessing.get_context("fork")
  barrier = context.Barrier(2)
  workers = [context.Process(target=_push_after_barrier, args=(barrier, path, bases, fingerprint))
             for path, fingerprint in models.values()]
  for worker in workers:
    worker.start()
  for worker in workers:
    worker.join(timeout=600)
  assert [worker.exitcode for worker in workers] == [0, 0]

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
  with pytest.raises(RuntimeError, match="does not match the model"):
    pusher.push_version(model, base, pusher.saved_model_fingerprint(model))
  assert pusher.serving_versions(base) == []


def test_a_staging_directory_of_a_live_push_is_left_alone(tmp_path):
  base = tmp_path / "serving"
  live = base / f".incomplete-{socket.gethostname()}-{os.getpid()}-0123abcd"
  dead = base / f".incomplete-{socket.gethostname()}-{2**22 + 1}-0123abcd"
  for staging in (live, dead):
    staging.mkdir(parents=True)
  pusher.remove_stale_staging_dirs(str(base))
  assert live.exists() and not dead.exists()
