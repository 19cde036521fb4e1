"""Pushing: numeric versions appear whole, and the serving model is never pushed twice."""
import json
import os

from components import pusher


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
  version_dir = pusher.push_version(model, base, "abc")
  assert os.path.basename(version_dir).isdigit()
  assert os.listdir(base) == [os.path.basename(version_dir)]
  assert pusher.pushed_fingerprint(version_dir) == "abc"
  with open(os.path.join(version_dir, "saved_model.pb"), "rb") as f:
    assert f.read() == b"graph"
  with open(os.path.join(version_dir, pusher.PUSH_INFO_PATH)) as f:
    assert json.load(f)["source"] == model


def test_versions_increase_even_within_one_second_and_earlier_ones_stay(tmp_path):
  model = _model(str(tmp_path / "model"))
  base = str(tmp_path / "serving")
  first = pusher.push_version(model, base, "one")
  second = pusher.push_version(model, base, "two")
  assert int(os.path.basename(second)) > int(os.path.basename(first))
  assert pusher.serving_versions(base) == sorted(int(os.path.basename(d)) for d in (first, second))


def test_a_staging_directory_left_by_a_killed_push_is_invisible_and_replaced(tmp_path):
  model = _model(str(tmp_path / "model"))
  base = tmp_path / "serving"
  stale = base / ".incomplete-99999999999"
  stale.mkdir(parents=True)
  (stale / "half-written").write_bytes(b"")
  assert pusher.serving_versions(str(base)) == []
  pusher.push_version(model, str(base), "abc")
  assert len(pusher.serving_versions(str(base))) == 1
