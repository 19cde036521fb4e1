"""The pipeline's run history: one small JSON file per run in a history folder that every
runner can write and read (a local folder, or gs:// / s3:// beside a Kubeflow run's outputs).
The span check writes the entry of a run that trains nothing (skipped or refused); the run
report writes the entry of a run that trained, with the gate's decision, the pushed version and
its figures, before it renders the report's History section from the last entries.
`python -m local_runner history` prints the same table.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import uuid
from typing import List, Optional, Sequence, Tuple

from tfx.dsl.io import fileio

from storage.object_storage import is_object_store_uri

log = logging.getLogger(__name__)

DEFAULT_RUNS = 10  # Runs the History section and `history` show by default.
ENTRY_SUFFIX = ".json"
# What a run's entry says happened.
PUSHED = "pushed"  # Trained, blessed, checked and pushed.
NOT_PUSHED = "not pushed"  # Trained; the gate or the served-model check refused it.
SKIPPED = "skipped"  # Nothing new: the newest span is already in production.
REFUSED_SPAN = "refused"  # The span is older than production's: nothing trained.
OUTCOMES = (PUSHED, NOT_PUSHED, SKIPPED, REFUSED_SPAN)
METRICS = ("accuracy", "nll", "ece", "corrupted_accuracy", "corrupted_nll", "corrupted_ece")
HEADER = ("span", "date (UTC)", "outcome", "why", "pushed version", "accuracy", "NLL", "ECE",
          "cA", "cNLL", "cECE")


@dataclasses.dataclass(frozen=True)
class Entry:
  """One run of the pipeline as its history keeps it."""
  time: str  # When the entry was written, UTC, ISO 8601 (YYYY-MM-DDTHH:MM:SSZ).
  run_id: str
  span: int  # The Examples' span the run read (0: no span in the input pattern).
  data_version: int  # The Examples' version.
  outcome: str  # One of OUTCOMES.
  reason: str  # Why: the gate's failures, the span check's decision, ...
  blessed: Optional[bool] = None  # The gate's decision; None when nothing was trained.
  pushed_version: Optional[str] = None  # The version directory that serves the model.
  train_window: Optional[str] = None  # The spans trained on, when several.
  accuracy: Optional[float] = None  # Clean eval, calibrated (the gated figures).
  nll: Optional[float] = None
  ece: Optional[float] = None
  corrupted_accuracy: Optional[float] = None  # Means over the corrupted test set.
  corrupted_nll: Optional[float] = None
  corrupted_ece: Optional[float] = None

  def __post_init__(self):
    if self.outcome not in OUTCOMES:
      raise ValueError(f"history entry outcome {self.outcome!r} is not one of {OUTCOMES}")

  @classmethod
  def from_dict(cls, values: dict) -> "Entry":
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in values.items() if name in names})


def now() -> str:
  return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def append(history_dir: str, entry: Entry) -> str:
  """Writes the entry as a file of its own (object stores cannot append), named so that names
  sort by time; returns its path."""
  if not is_object_store_uri(history_dir):
    fileio.makedirs(history_dir)
  stamp = entry.time.replace("-", "").replace(":", "")
  path = os.path.join(history_dir, f"{stamp}-{uuid.uuid4().hex[:8]}{ENTRY_SUFFIX}")
  with fileio.open(path, "w") as f:
    f.write(json.dumps(dataclasses.asdict(entry), indent=1, sort_keys=True))
  return path


def read(history_dir: str, last: int = DEFAULT_RUNS) -> List[Entry]:
  """The last `last` entries, oldest first; a file that is not an entry is named in a warning
  and left out."""
  if not fileio.exists(history_dir):
    return []
  entries = []
  for name in sorted(fileio.listdir(history_dir)):
    name = name.rstrip("/")
    if not name.endswith(ENTRY_SUFFIX):
      continue
    path = os.path.join(history_dir, name)
    try:
      with fileio.open(path, "r") as f:
        entries.append((name, Entry.from_dict(json.loads(f.read()))))
    except (ValueError, TypeError, AttributeError) as error:
      log.warning("Run history: skipping %s: not a history entry (%s).", path, error)
  entries.sort(key=lambda pair: (pair[1].time, pair[0]))
  return [entry for _, entry in entries[-last:]] if last > 0 else []


def _number(value: Optional[float]) -> str:
  return "n/a" if value is None else f"{value:.4f}"


def row(entry: Entry) -> Tuple[str, ...]:
  """The entry as the cells of HEADER."""
  span = str(entry.span) + (f" (v{entry.data_version})" if entry.data_version else "")
  if entry.train_window:
    span += f" [window {entry.train_window}]"
  outcome = entry.outcome
  if entry.blessed is not None:
    outcome = f"{'blessed' if entry.blessed else 'refused by the gate'}, {entry.outcome}"
  return (span, entry.time.replace("T", " ").rstrip("Z"), outcome, entry.reason or "",
          entry.pushed_version or "", *(_number(getattr(entry, name)) for name in METRICS))


def printable(text: str) -> str:
  """Text for a terminal: control characters (a newline, an escape sequence) shown as escapes,
  so no name in an entry can move the cursor, recolour the terminal or forge a table row."""
  return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                 for c in text)


def text_table(entries: Sequence[Entry]) -> str:
  """The history as a plain-text table (what `python -m local_runner history` prints)."""
  rows = [HEADER] + [tuple(printable(cell) for cell in row(entry)) for entry in entries]
  widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
  lines = ["  ".join(cell.ljust(width) for cell, width in zip(r, widths)).rstrip()
           for r in rows]
  lines.insert(1, "  ".join("-" * width for width in widths))
  return "\n".join(lines)
