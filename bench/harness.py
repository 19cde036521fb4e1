"""What every benchmark shares: its command line, its variants run in turn and timed, the
pipeline steps' times read back from MLMD, and the table it prints."""
import argparse
import dataclasses
import os
import resource
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Flag:
  """One `--name` flag: its default and what it means. Its type is the default's (str for a
  default of None; a flag whose default is False takes no value and turns it on); `multiple`
  collects every value given (the flag may repeat); `hidden` flags are for the script's own
  child processes."""
  name: str
  default: Any
  help: str
  type: Optional[Callable[[str], Any]] = None
  choices: Optional[Sequence[str]] = None
  multiple: bool = False
  hidden: bool = False


def output_dir(what: str = "a finished run's output directory") -> Flag:
  """The flag naming the run a benchmark reads (default: `make run`'s)."""
  return Flag("output_dir", "outputs", f"{what} (default %(default)s, make run's)")


def repeats(default: int, counts: str = "the median counts") -> Flag:
  """The flag of how many times each variant runs, in turn."""
  return Flag("repeats", default, f"runs per variant, the variants in turn; {counts} (default "
                                  "%(default)s)")


def keep(what: str, deleted: str = "at the end") -> Flag:
  """The switch that keeps what a benchmark writes and would delete."""
  return Flag("keep", False, f"keep {what} (default: deleted {deleted})")


def parser(doc: str, *flags: Flag) -> argparse.ArgumentParser:
  """The script's parser: its description is the docstring's first paragraph (whole sentences;
  examples and details stay in the file), its flags `flags`."""
  built = argparse.ArgumentParser(description=doc.split("\n\n")[0])
  for flag in flags:
    options: Dict[str, Any] = {"help": argparse.SUPPRESS if flag.hidden else flag.help}
    if flag.default is False:
      built.add_argument(f"--{flag.name}", action="store_true", **options)
      continue
    if flag.multiple:
      options.update(action="append", required=True)
    else:
      options["default"] = flag.default
    value_type = flag.type or (type(flag.default) if flag.default is not None else str)
    if value_type is not str:
      options["type"] = value_type
    if flag.choices:
      options["choices"] = flag.choices
    built.add_argument(f"--{flag.name}", **options)
  return built


def cpu_seconds() -> float:
  """User + system CPU seconds of this process and its finished children (Beam's SDK workers,
  which each Beam run waits for): what a run costs whatever else loads the machine."""
  return sum(usage.ru_utime + usage.ru_stime for usage in
             (resource.getrusage(resource.RUSAGE_SELF),
              resource.getrusage(resource.RUSAGE_CHILDREN)))


@dataclasses.dataclass(frozen=True)
class Timed:
  """A call's result, its wall seconds and its CPU seconds (cpu_seconds)."""
  value: Any
  wall: float
  cpu: float


def timed(call: Callable[..., Any], *args, **kwargs) -> Timed:
  wall, cpu = time.perf_counter(), cpu_seconds()
  value = call(*args, **kwargs)
  return Timed(value, time.perf_counter() - wall, cpu_seconds() - cpu)


def alternate(variants: Mapping[str, Callable[[], Any]], rounds: int) -> Dict[str, List[Timed]]:
  """Each variant timed once per round, the variants in turn and in reverse order every other
  round, so a change of load hits them alike: {variant: [Timed per round]}."""
  results: Dict[str, List[Timed]] = {name: [] for name in variants}
  names = list(variants)
  for round_ in range(rounds):
    for name in names if round_ % 2 == 0 else reversed(names):
      results[name].append(timed(variants[name]))
  return results


def load_average() -> str:
  return f"load average {os.getloadavg()[0]:.1f}"


def execution_seconds(connection, component: str) -> Dict[int, float]:
  """{execution id: wall seconds} of every execution of the component whose type name ends in
  `component`, from the MLMD store at `connection`."""
  from ml_metadata.metadata_store import metadata_store
  store = metadata_store.MetadataStore(connection)
  return {execution.id: (execution.last_update_time_since_epoch -
                         execution.create_time_since_epoch) / 1000.0
          for execution in store.get_executions()
          if store.get_execution_types_by_id([execution.type_id])[0].name.endswith(component)}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
  """A Markdown table, its first `left` columns aligned left and the others (figures) right;
  cells are printed as given (format figures first for their digits)."""
  lines = ["| " + " | ".join(headers) + " |",
           "|" + " --- |" * left + " ---: |" * (len(headers) - left)]
  lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
  return "\n".join(lines)
