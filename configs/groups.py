"""Configs made of groups: small frozen dataclasses nested as `config.trainer.model.depth`, each
with its own validation and its own `--help` section, while every leaf field keeps a flat flag
name (`--depth`, or its dotted path `--trainer.model.depth`) unique across the groups."""
import dataclasses
import typing
from typing import Any, Dict, List, Mapping, Optional, Tuple


def group_fields(cls: type) -> Dict[str, type]:
  """The fields of `cls` that are groups (dataclasses, or Optional ones), with their classes."""
  hints = typing.get_type_hints(cls)
  groups = {}
  for field in dataclasses.fields(cls):
    hint = hints[field.name]
    if typing.get_origin(hint) is typing.Union:
      others = [arg for arg in typing.get_args(hint) if arg is not type(None)]
      hint = others[0] if len(others) == 1 else hint
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
      groups[field.name] = hint
  return groups


def leaf_paths(cls: type, prefix: Tuple[str, ...] = ()) -> Dict[str, Tuple[str, ...]]:
  """Every leaf (non-group) field of `cls` and its groups: name -> path from `cls`."""
  groups = group_fields(cls)
  paths: Dict[str, Tuple[str, ...]] = {}
  for field in dataclasses.fields(cls):
    found = (leaf_paths(groups[field.name], prefix + (field.name,)) if field.name in groups
             else {field.name: prefix + (field.name,)})
    twice = set(found) & set(paths)
    if twice:
      raise TypeError(f"{cls.__name__}: field name(s) {sorted(twice)} in two groups; a flat "
                      "flag must name exactly one field.")
    paths.update(found)
  return paths


def leaf_hints(cls: type) -> Dict[str, Any]:
  """Every leaf field's type annotation, by name."""
  hints: Dict[str, Any] = {}
  groups = group_fields(cls)
  for name, hint in typing.get_type_hints(cls).items():
    if name in groups:
      hints.update(leaf_hints(groups[name]))
    elif name in {f.name for f in dataclasses.fields(cls)}:
      hints[name] = hint
  return hints


def flat_name(cls: type, flag: str) -> str:
  """A flag's leaf field name: the flag itself, or the last part of its dotted path."""
  if "." in flag:
    paths = {".".join(path): name for name, path in leaf_paths(cls).items()}
    return paths.get(flag, flag)
  return flag


def build(cls: type, values: Mapping[str, Any], start: Optional[Any] = None):
  """A `cls` from leaf field values by flat name, over `start`'s values (else the defaults):
  only the groups given a value are built again, each validated by its own __post_init__."""
  unknown = set(values) - set(leaf_paths(cls))
  if unknown:
    raise ValueError(f"Unknown config field(s): {sorted(unknown)}.")
  return _build(cls, values, start)


def _build(cls: type, values: Mapping[str, Any], start: Optional[Any]):
  groups = group_fields(cls)
  fields = {}
  for field in dataclasses.fields(cls):
    current = getattr(start, field.name) if start is not None else None
    if field.name in groups:
      given = {name: value for name, value in values.items()
               if name in leaf_paths(groups[field.name])}
      if given:
        fields[field.name] = _build(groups[field.name], given, current)
      elif start is not None:
        fields[field.name] = current
    elif field.name in values:
      fields[field.name] = values[field.name]
    elif start is not None:
      fields[field.name] = current
  return cls(**fields)


def flatten(config: Any) -> Dict[str, Any]:
  """Every leaf field's value by flat name (an unset Optional group has none)."""
  values = {}
  groups = group_fields(type(config))
  for field in dataclasses.fields(config):
    value = getattr(config, field.name)
    if field.name not in groups:
      values[field.name] = value
    elif value is not None:
      values.update(flatten(value))
  return values


def sections(cls: type, prefix: str = "") -> List[Tuple[str, str, type]]:
  """(heading, dotted path, class) of `cls` and each group under it that holds leaf fields,
  in field order; the heading is the class docstring's first line."""
  groups = group_fields(cls)
  found = []
  if any(f.name not in groups for f in dataclasses.fields(cls)):
    found.append(((cls.__doc__ or "").strip().splitlines()[0].rstrip("."), prefix, cls))
  for name, group in groups.items():
    found += sections(group, f"{prefix}{name}.")
  return found


def defaults(config: Any, cls: type) -> Dict[str, Any]:
  """Every leaf field of `cls` with its value in `config` (an instance of `cls` or of a base
  class of it), else its default."""
  values = {}
  groups = group_fields(cls)
  for field in dataclasses.fields(cls):
    if field.name in groups:
      values.update(defaults(getattr(config, field.name, None), groups[field.name]))
    else:
      values[field.name] = getattr(config, field.name, field.default)
  return values
