"""Spans of a file source: `--image_dir` or `--tfrecord_dir` with TFX's placeholders ({SPAN},
{SPAN:width}, {VERSION}, or {YYYY}, {MM} and {DD}, a date counted in days since 1970-01-01),
one folder per span (and version), as TFX's file-based ExampleGen reads them
(docs/pipeline.md, "New data every day").

The folders are matched with TFX's own glob and regex (tfx/components/example_gen/utils.py,
`_create_matching_glob_and_regex` and `_find_matched_span_version_from_path`); the span a run
takes is the newest (or the requested one) and, of its versions, the newest, as TFX's driver
resolves them. A pattern is a path whose placeholders stand in folder names; what follows the
first folder with a placeholder is part of the pattern too.
"""
from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Tuple

SCHEDULED_TIME_MACRO = "[[ScheduledTime"  # A KFP recurring run's macro, e.g. .2006-01-02]].
# kubeflow/pipelines expands macros in a v2 recurring run's parameters from this version on
# (backend/src/apiserver/template/v2_template.go, pull request 12494).
MACRO_BACKEND_VERSION = "2.16.0"
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


class SpanError(ValueError):
  """A span pattern that cannot be read: invalid, nothing matches, or the span is missing or
  empty; names the pattern and the folder."""


@dataclasses.dataclass(frozen=True)
class Span:
  """One span folder: its span number, version (None without {VERSION}) and path."""
  number: int
  version: Optional[int]
  folder: str

  def to_json(self) -> list:
    return [self.number, self.version, self.folder]

  @classmethod
  def from_json(cls, value) -> "Span":
    number, version, folder = value
    return cls(int(number), None if version is None else int(version), folder)


def _utils():
  from tfx.components.example_gen import utils  # Deferred: TFX is slow to import.
  return utils


def _split(pattern: str):
  from tfx.proto import example_gen_pb2
  return example_gen_pb2.Input.Split(name="span", pattern=pattern)


def is_pattern(path: Optional[str]) -> bool:
  """Whether a path holds any of TFX's span, version or date placeholders."""
  if not path:
    return False
  utils = _utils()
  return bool(re.search(utils.SPAN_FULL_REGEX, path) or re.search(utils.VERSION_FULL_REGEX, path)
              or any(spec in path for spec in utils.DATE_SPECS))


def check_pattern(path: str) -> Tuple[bool, bool, bool]:
  """(has {SPAN}, has the date, has {VERSION}) of a valid pattern; SpanError saying what is
  wrong otherwise (TFX's own checks, and a span placeholder in every pattern)."""
  utils = _utils()
  try:
    is_span, is_date, is_version = utils.verify_split_pattern_specs(_split(path))
    for regex, name in ((utils.SPAN_FULL_REGEX, "SPAN"), (utils.VERSION_FULL_REGEX, "VERSION")):
      if re.search(regex, path):
        utils._get_spec_width(regex, name, _split(path))  # pylint: disable=protected-access
  except ValueError as error:
    raise SpanError(f"pattern {path}: {error}") from None
  if not (is_span or is_date):
    raise SpanError(f"pattern {path}: a span pattern needs {{SPAN}} or {{YYYY}}, {{MM}} and "
                    "{DD}")
  return is_span, is_date, is_version


def split_base(path: str) -> Tuple[str, str]:
  """(the fixed folder above the first placeholder, the pattern below it): `/d/{SPAN}/x` ->
  (`/d`, `{SPAN}/x`). TFX's FileBasedExampleGen takes the first as input_base and the second
  in each split's pattern."""
  parts = path.rstrip("/").split("/")
  first = next(i for i, part in enumerate(parts) if is_pattern(part))
  return "/".join(parts[:first]) or "/", "/".join(parts[first:])


def key_prefix(pattern: str, span: Span) -> str:
  """The span folder's path below the pattern's fixed base, e.g. '2026-12-01' or '7/v2': what
  keeps the keys of several spans' images apart."""
  base, _ = split_base(pattern)
  return span.folder[len(base.rstrip("/")) + 1:]


def available(pattern: str) -> List[Span]:
  """Every folder matching the pattern, by span then version (oldest first)."""
  import tensorflow as tf
  utils = _utils()
  is_span, is_date, is_version = check_pattern(pattern)
  pattern = pattern.rstrip("/")
  glob, regex = utils._create_matching_glob_and_regex(  # pylint: disable=protected-access
      "", _split(pattern), is_span, is_date, is_version, None)
  found = []
  for path in tf.io.gfile.glob(glob):
    path = path.rstrip("/")
    if not re.fullmatch(regex, path) or not tf.io.gfile.isdir(path):
      continue  # TFX's regex is searched, not matched whole: 2026-12-01.bak is not a span.
    try:
      _, number, _, version = utils._find_matched_span_version_from_path(  # pylint: disable=protected-access
          path, regex, is_span, is_date, is_version)
    except ValueError:
      continue  # {SPAN} matched letters, or an impossible date: not a span folder.
    found.append(Span(number, version, path))
  return sorted(found, key=lambda s: (s.number, -1 if s.version is None else s.version))


def newest_versions(pattern: str) -> List[Span]:
  """Each span once, at its newest version, oldest span first."""
  by_number = {}
  for span in available(pattern):
    by_number[span.number] = span  # Sorted: the newest version comes last.
  return [by_number[number] for number in sorted(by_number)]


def requested_span(pattern: str, value: str) -> Optional[int]:
  """The span number a run asks for: None for "" (the newest); a number; with a date pattern
  also a date YYYY-MM-DD. An unexpanded scheduled-time macro is refused naming the KFP
  backend version that expands it."""
  value = (value or "").strip()
  if not value:
    return None
  if value.startswith("[["):
    raise SpanError(
        f"span {value!r} reached the run unexpanded: a KFP backend expands "
        f"{SCHEDULED_TIME_MACRO}...]] in a recurring run's parameters from version "
        f"{MACRO_BACKEND_VERSION} on (an older one passes it as it is); upgrade the backend, "
        "or give the span or date itself")
  _, is_date, _ = check_pattern(pattern)
  if value.isdigit():
    return int(value)
  date = _DATE.fullmatch(value)
  if date and is_date:
    try:
      return _utils().date_to_span_number(*(int(part) for part in date.groups()))
    except ValueError:
      raise SpanError(f"span {value!r} is not a date (YYYY-MM-DD)") from None
  raise SpanError(f"span {value!r} must be a span number" +
                  (" or a date YYYY-MM-DD" if is_date else
                   f" ({pattern} has {{SPAN}}, not a date)"))


def describe_span(pattern: str, number: int) -> str:
  """A span as its pattern names it: a date for a date pattern, else the number."""
  if check_pattern(pattern)[1]:
    year, month, day = _utils().span_number_to_date(number)
    return f"{year:04d}-{month:02d}-{day:02d} (span {number})"
  return f"span {number}"


def _folder_for(pattern: str, number: int) -> str:
  """The folder a span's pattern names (its {VERSION} left as a placeholder)."""
  is_span, is_date, _ = check_pattern(pattern)
  utils = _utils()
  if is_span:
    token = utils._make_zero_padding_spec_value(  # pylint: disable=protected-access
        utils.SPAN_FULL_REGEX, pattern, number)
    return re.sub(utils.SPAN_FULL_REGEX, token, pattern)
  year, month, day = utils.span_number_to_date(number)
  for spec, value in zip(utils.DATE_SPECS, (f"{year:04d}", f"{month:02d}", f"{day:02d}")):
    pattern = pattern.replace(spec, value)
  return pattern


def _is_empty(folder: str) -> bool:
  import tensorflow as tf
  return not any(not name.startswith(".") for name in tf.io.gfile.listdir(folder))


def resolve(pattern: str, span: str = "") -> Span:
  """The span a run reads: the requested one (`span`, see requested_span) or the newest, at
  its newest version. SpanError naming the pattern and the folder when nothing matches, the
  requested span is missing or the span's folder is empty."""
  wanted = requested_span(pattern, span)
  spans = newest_versions(pattern)
  if not spans:
    raise SpanError(f"no folder matches the span pattern {pattern}")
  if wanted is None:
    chosen = spans[-1]
  else:
    chosen = next((s for s in spans if s.number == wanted), None)
    if chosen is None:
      raise SpanError(
          f"{describe_span(pattern, wanted)} of the pattern {pattern} is missing: no folder "
          f"{_folder_for(pattern, wanted)}; the newest is {spans[-1].folder}")
  if _is_empty(chosen.folder):
    raise SpanError(f"{'the requested' if wanted is not None else 'the newest'} "
                    f"{describe_span(pattern, chosen.number)} of the pattern {pattern} is empty: "
                    f"{chosen.folder} holds no files")
  return chosen


def window(pattern: str, newest: Span, count: int) -> List[Span]:
  """The `count` newest spans up to `newest` (itself first, then older ones, each at its newest
  version); fewer when fewer exist. Empty older folders are left out."""
  older = [s for s in newest_versions(pattern) if s.number < newest.number]
  older = [s for s in reversed(older) if not _is_empty(s.folder)]
  return [newest] + older[:max(count - 1, 0)]
