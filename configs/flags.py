"""`--name=value` flags over dataclass fields: one parser, and one `--help`, for every CLI."""
import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import configs
from configs import groups


def name_value_pairs(argv: Sequence[str]) -> List[Tuple[str, str]]:
  """`--name value` / `--name=value` arguments -> [(name, value text)], in order. A flag given
  twice is refused by name: no flag repeats (a list is one comma-separated value)."""
  pairs: List[Tuple[str, str]] = []
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
    first = next((text for given, text in pairs if given == name), None)
    if first is not None:
      raise ValueError(f"Flag --{name} is given more than once (--{name}={first} and "
                       f"--{name}={value}): give each flag once.")
    pairs.append((name, value))
  return pairs


def over_defaults(defaults: Sequence[str], argv: Sequence[str]) -> List[str]:
  """`argv` after those of the `defaults` flags it does not give, as `--name=value`: how a caller
  with flags of its own lets its user's replace them, when a flag given twice is an error."""
  given = {name.split(".")[-1] for name, _ in name_value_pairs(argv)}  # Leaf names are unique.
  return [f"--{name}={value}" for name, value in name_value_pairs(defaults)
          if name.split(".")[-1] not in given] + list(argv)


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


CONFIG_HELP = ("The preset the other flags override, one of those in configs/: "
               f"{', '.join(configs.PRESETS)}.")


def field_help(cls) -> Dict[str, str]:
  """Each field's help, the comments that document it where it is defined: its end-of-line
  comment with the comment-only lines right below it that start at that comment's column, then
  the comment block directly above it. A comment block with a blank line below it heads the
  fields that follow and is no field's help. Below a field, a comment at any other column is
  refused, wherever the field stands; a method's own comments (its decorators' included), the
  class decorator's and those above the first field at other columns are not read."""
  source = textwrap.dedent(inspect.getsource(cls))
  body = ast.parse(source).body[0].body
  names = {f.name for f in dataclasses.fields(cls)}
  statements = {}  # Line -> the field it defines (None: another statement, e.g. a method).
  for node in body:
    name = node.target.id if isinstance(node, ast.AnnAssign) else None
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    statements.update(dict.fromkeys(range(first, node.end_lineno + 1),
                                    name if name in names else None))
  comments = {token.start[0]: (token.start[1], token.string.lstrip("#").strip())
              for token in tokenize.generate_tokens(io.StringIO(source).readline)
              if token.type == tokenize.COMMENT}
  parts: Dict[str, List[str]] = {name: [] for name in statements.values() if name}
  above: Dict[str, List[str]] = {}
  block: List[str] = []
  continued = None  # (field, column) of the end-of-line comment the next line may continue.
  below_field = False  # The last statement above the line defines a field (not a method).
  for number, line in enumerate(source.splitlines(), start=1):
    column, text = comments.get(number, (None, ""))
    if number in statements:
      name = statements[number]
      below_field = name is not None
      if name and name not in above:
        above[name] = block
      block, continued = [], None
      if name and column is not None:
        parts[name].append(text)
        continued = (name, column)
    elif column is None:  # A blank line, or the class's own: no comment runs on past it.
      block, continued = [], None
    elif continued and column == continued[1]:
      parts[continued[0]].append(text)
    elif column == body[0].col_offset:
      block.append(text)
      continued = None
    elif not below_field:  # Above the first field, or a method's own below its last line.
      block, continued = [], None
    else:
      raise ValueError(f"{cls.__name__}, line {number} of its definition: a comment neither "
                       "continues the end-of-line comment above it (same column) nor starts at "
                       f"the fields' indentation: {line.strip()!r}.")
  return {name: " ".join(parts[name] + above[name]) for name in parts}


def describe_flags(sections: Sequence[Tuple[str, Sequence[Tuple[str, Any, str]]]]) -> str:
  """`--help` text: per section, each (flag, default, help) on one line, the help wrapped."""
  lines = []
  for title, flags in sections:
    if not flags:
      continue
    lines += ["", f"{title}:"]
    for name, default, text in flags:
      lines.append(f"  --{name}  (default: {default!r})")
      lines += textwrap.wrap(text, width=96, initial_indent="      ",
                             subsequent_indent="      ", break_on_hyphens=False)
  return "\n".join(lines)


def config_sections(config: Any, cls: type) -> List[Tuple[str, List[Tuple[str, Any, str]]]]:
  """`--help` sections of a grouped config: one per group, headed by its docstring's first line
  and dotted path, each flag with its value in `config` (an unset group's: the defaults)."""
  values = groups.defaults(config, cls)
  sections = []
  for heading, path, group in groups.sections(cls):
    helps = field_help(group)
    nested = groups.group_fields(group)
    title = f"{heading} ({path.rstrip('.')})" if path else heading
    sections.append((title, [(f.name, values[f.name], helps.get(f.name, ""))
                             for f in dataclasses.fields(group) if f.name not in nested]))
  return sections


def parse_config_flags(argv: Sequence[str], cls: type,
                       other_hints: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
  """Flags of a grouped config (`--depth=16`, or by dotted path `--model.depth=16`) and of
  `other_hints` -> {leaf field: typed value}."""
  flags = [f"--{groups.flat_name(cls, name)}={value}" for name, value in name_value_pairs(argv)]
  return parse_flags(flags, {**groups.leaf_hints(cls), **(other_hints or {})})
