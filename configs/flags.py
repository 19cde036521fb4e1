"""`--name=value` flags over dataclass fields: one parser for the pipeline and the trainer."""
import typing
from typing import Any, Dict, List, Mapping, Sequence, Tuple


def name_value_pairs(argv: Sequence[str]) -> List[Tuple[str, str]]:
  """`--name value` / `--name=value` arguments -> [(name, value text)], in order."""
  pairs = []
  args = list(argv)
  while args:
    arg = args.pop(0)
    if not arg.startswith("--"):
      raise ValueError(f"Unexpected argument {arg!r}: flags look like --name=value.")
    name, has_value, value = arg[2:].partition("=")
    if not has_value:
      if not args:
        raise ValueError(f"Flag --{name} needs a value.")
      value = args.pop(0)
    pairs.append((name, value))
  return pairs


def parse_flags(argv: Sequence[str], hints: Mapping[str, Any]) -> Dict[str, Any]:
  """Flags -> {field: typed value}; `hints` maps each known field to its type annotation."""
  values = {}
  for name, value in name_value_pairs(argv):
    if name not in hints:
      raise ValueError(f"Unknown flag --{name}. Known flags: "
                       + ", ".join(f"--{n}" for n in sorted(hints)) + ".")
    values[name] = parse_value(name, value, hints[name])
  return values


def parse_value(name: str, text: str, hint: Any) -> Any:
  optional = type(None) in typing.get_args(hint)
  if optional:
    if text.lower() in ("none", ""):
      return None
    hint = next(a for a in typing.get_args(hint) if a is not type(None))
  try:
    if hint is bool:
      if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(text)
      return text.lower() in ("true", "1", "yes")
    if typing.get_origin(hint) is tuple:
      item = typing.get_args(hint)[0]
      return tuple(item(v) for v in text.split(",") if v.strip())
    return hint(text)
  except ValueError:
    raise ValueError(f"Invalid value for --{name}: {text!r} is not a valid "
                     f"{getattr(hint, '__name__', hint)}.") from None
