"""Cron expressions as Kubeflow Pipelines schedules them: six fields, seconds first (robfig/cron),
so a five-field crontab line fails here, before any call to the server.
"""
import re

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# (name, lowest, highest, names for low..high, whether '?' is allowed)
_FIELDS = (("second", 0, 59, (), False), ("minute", 0, 59, (), False),
           ("hour", 0, 23, (), False), ("day of month", 1, 31, (), True),
           ("month", 1, 12, _MONTHS, False), ("day of week", 0, 6, _DAYS, True))
_PART = re.compile(r"(?P<range>\*|\?|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/(?P<step>[0-9]+))?")
EXAMPLE = "'0 0 3 * * *' (03:00 every day) or '0 30 2 * * MON' (02:30 on Mondays)"


class CronError(ValueError):
  pass


def check_cron(expression: str) -> str:
  """Returns the expression when KFP's scheduler accepts it; raises CronError naming the field."""
  fields = expression.split()
  if len(fields) != len(_FIELDS):
    raise CronError(
        f"Invalid cron expression {expression!r}: Kubeflow Pipelines wants 6 fields (second "
        f"minute hour day-of-month month day-of-week), got {len(fields)}; e.g. {EXAMPLE}.")
  for text, (name, low, high, names, question_allowed) in zip(fields, _FIELDS):
    for part in text.split(","):
      problem = _part_problem(part, low, high, names, question_allowed)
      if problem:
        raise CronError(f"Invalid cron expression {expression!r}: {name} field {text!r}: "
                        f"{problem}; e.g. {EXAMPLE}.")
  return expression


def _part_problem(part: str, low: int, high: int, names: tuple, question_allowed: bool):
  match = _PART.fullmatch(part)
  if not match:
    return f"{part!r} is not a value, range, '*' or step"
  if match["step"] is not None and int(match["step"]) == 0:
    return "a step must be > 0"
  text = match["range"]
  if text == "?" and not question_allowed:
    return "'?' is only allowed for day of month and day of week"
  if text in ("*", "?"):
    return None
  bounds = []
  for value in text.split("-"):
    number = _value(value, low, names)
    if number is None or not low <= number <= high:
      allowed = f"{low}-{high}" + (f" or {names[0]}-{names[-1]}" if names else "")
      return f"{value!r} is outside {allowed}"
    bounds.append(number)
  if len(bounds) == 2 and bounds[0] > bounds[1]:
    return f"range {text!r} runs backwards"
  return None


def _value(text: str, low: int, names: tuple):
  if text.isdigit():
    return int(text)
  if text.upper() in names:
    return low + names.index(text.upper())
  return None
