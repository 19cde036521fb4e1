"""Span patterns resolved as TFX's file-based ExampleGen resolves them: the newest span, then its
newest version; a requested span or date; the window of older spans; what cannot be read is
refused naming the pattern and the folder."""
import os

import pytest
from tfx.components.example_gen import utils as tfx_utils
from tfx.proto import example_gen_pb2

from components import spans


def _folders(root, *relatives, empty=()):
  for relative in relatives:
    os.makedirs(os.path.join(root, relative), exist_ok=True)
    if relative not in empty:
      with open(os.path.join(root, relative, "image.png"), "wb") as f:
        f.write(b"x")


def test_a_pattern_is_a_path_with_tfxs_placeholders():
  assert spans.is_pattern("gs://b/images/{YYYY}-{MM}-{DD}")
  assert spans.is_pattern("/d/{SPAN:3}/v{VERSION}")
  assert not spans.is_pattern("/d/images") and not spans.is_pattern(None)
  assert spans.split_base("gs://b/images/{SPAN}/photos") == ("gs://b/images", "{SPAN}/photos")


@pytest.mark.parametrize("pattern, message", [
    ("/d/v{VERSION}", "Version spec provided, but Span or Date spec is not present"),
    ("/d/{SPAN}/{SPAN}", "Only one {SPAN} is allowed"),
    ("/d/{YYYY}-{MM}", "Exactly one of each date spec"),
    ("/d/{SPAN}-{YYYY}{MM}{DD}", "Either span spec or date specs must be specified exclusively"),
    ("/d/{SPAN:x}", "Width modifier in SPAN spec is not a positive integer"),
])
def test_an_invalid_pattern_is_refused_with_tfxs_reason_and_the_pattern(pattern, message):
  with pytest.raises(spans.SpanError) as raised:
    spans.check_pattern(pattern)
  assert str(raised.value).startswith(f"pattern {pattern}: ") and message in str(raised.value)


def test_the_newest_date_is_read_and_a_date_is_a_span_of_days_since_1970(tmp_path):
  _folders(tmp_path, "2026-11-30", "2026-12-01", "2026-12-01.bak", "notes")
  pattern = str(tmp_path / "{YYYY}-{MM}-{DD}")
  assert [s.folder for s in spans.available(pattern)] == [str(tmp_path / "2026-11-30"),
                                                         str(tmp_path / "2026-12-01")]
  newest = spans.resolve(pattern)
  assert newest.number == tfx_utils.date_to_span_number(2026, 12, 1) and newest.version is None
  assert spans.key_prefix(pattern, newest) == "2026-12-01"


def test_the_newest_span_then_its_newest_version_as_tfxs_own_driver_finds_them(tmp_path):
  _folders(tmp_path, "3/v1", "3/v2", "10/v1", "10/v0", "9/v7")
  pattern = str(tmp_path / "{SPAN}" / "v{VERSION}")
  newest = spans.resolve(pattern)
  assert (newest.number, newest.version, newest.folder) == (10, 1, str(tmp_path / "10/v1"))
  # TFX's own resolution, over the same folders, agrees.
  split = example_gen_pb2.Input.Split(name="train", pattern="{SPAN}/v{VERSION}/*")
  _, span, version = tfx_utils.calculate_splits_fingerprint_span_and_version(
      str(tmp_path), [split])
  assert (span, version) == (10, 1)
  assert spans.resolve(pattern, "3").folder == str(tmp_path / "3/v2")
  assert spans.key_prefix(pattern, spans.resolve(pattern, "3")) == "3/v2"


def test_a_requested_span_or_date_is_read(tmp_path):
  _folders(tmp_path, "2026-11-30", "2026-12-01")
  pattern = str(tmp_path / "{YYYY}-{MM}-{DD}")
  assert spans.resolve(pattern, "2026-11-30").folder == str(tmp_path / "2026-11-30")
  number = tfx_utils.date_to_span_number(2026, 11, 30)
  assert spans.resolve(pattern, str(number)).folder == str(tmp_path / "2026-11-30")


def test_missing_and_empty_spans_are_refused_naming_the_pattern_and_the_folder(tmp_path):
  _folders(tmp_path, "2026-11-30", "2026-12-01", empty=("2026-12-01",))
  pattern = str(tmp_path / "{YYYY}-{MM}-{DD}")
  with pytest.raises(spans.SpanError) as raised:
    spans.resolve(pattern)
  assert str(raised.value) == (
      f"the newest 2026-12-01 (span 20788) of the pattern {pattern} is empty: "
      f"{tmp_path}/2026-12-01 holds no files")
  with pytest.raises(spans.SpanError) as raised:
    spans.resolve(pattern, "2026-12-05")
  assert str(raised.value) == (
      f"2026-12-05 (span 20792) of the pattern {pattern} is missing: no folder "
      f"{tmp_path}/2026-12-05; the newest is {tmp_path}/2026-12-01")
  with pytest.raises(spans.SpanError, match=f"no folder matches the span pattern "
                     f"{tmp_path}/{{SPAN}}"):
    spans.resolve(str(tmp_path / "{SPAN}"))


@pytest.mark.parametrize("value, message", [
    ("[[ScheduledTime.2006-01-02]]", "from version 2.16.0 on"),
    ("yesterday", "must be a span number or a date YYYY-MM-DD"),
    ("2026-02-30", "is not a date"),
])
def test_a_requested_value_that_is_no_span_is_refused(value, message):
  with pytest.raises(spans.SpanError, match=message):
    spans.requested_span("/d/{YYYY}-{MM}-{DD}", value)


def test_a_date_is_refused_for_a_span_number_pattern():
  with pytest.raises(spans.SpanError, match=r"has \{SPAN\}, not a date"):
    spans.requested_span("/d/{SPAN}", "2026-12-01")
  assert spans.requested_span("/d/{SPAN}", "") is None


def test_the_window_is_the_newest_spans_up_to_the_one_read(tmp_path):
  _folders(tmp_path, "1", "2", "3", "4", "5", empty=("2",))
  pattern = str(tmp_path / "{SPAN}")
  window = spans.window(pattern, spans.resolve(pattern, "4"), 3)
  assert [s.number for s in window] == [4, 3, 1]  # 5 is after the run's span; 2 is empty.
  assert [s.number for s in spans.window(pattern, spans.resolve(pattern), 1)] == [5]
  assert [s.number for s in spans.window(pattern, spans.resolve(pattern, "1"), 4)] == [1]
  assert spans.Span.from_json(window[1].to_json()) == window[1]


def test_spans_on_object_storage(s3, s3_server):
  root, bucket = s3
  for key in ("images/2026-11-30/grass/a.png", "images/2026-12-01/grass/a.png",
              "images/2026-12-01/sky/b.png"):
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=b"x")
  pattern = f"{root}/images/{{YYYY}}-{{MM}}-{{DD}}"
  assert spans.resolve(pattern).folder == f"{root}/images/2026-12-01"
  assert [s.folder for s in spans.window(pattern, spans.resolve(pattern), 2)] == [
      f"{root}/images/2026-12-01", f"{root}/images/2026-11-30"]
