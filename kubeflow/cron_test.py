"""KFP's 6-field cron expressions (seconds first), checked before anything is sent."""
import pytest

from kubeflow.cron import CronError, check_cron


@pytest.mark.parametrize("expression", [
    "0 0 3 * * *", "0 30 2 * * MON", "0 */15 * * * *", "0 0 0 1 JAN-MAR ?",
    "30 0 6,18 ? * MON-FRI", "0 0 12 1-15/2 * *"])
def test_six_field_expressions_pass(expression):
  assert check_cron(expression) == expression


@pytest.mark.parametrize("expression, problem", [
    ("0 3 * * *", "wants 6 fields"),  # A crontab line: KFP would read it shifted by one field.
    ("0 0 3 * * * *", "wants 6 fields"),
    ("60 0 3 * * *", "second field '60': '60' is outside 0-59"),
    ("0 0 24 * * *", "hour field '24': '24' is outside 0-23"),
    ("0 0 3 0 * *", "day of month field '0': '0' is outside 1-31"),
    ("0 0 3 * 13 *", "month field '13': '13' is outside 1-12 or JAN-DEC"),
    ("0 0 3 * * FUNDAY", "day of week field 'FUNDAY': 'FUNDAY' is outside 0-6 or SUN-SAT"),
    ("0 0 3 * * 5-1", "runs backwards"),
    ("0 */0 * * * *", "step must be > 0"),
    ("? 0 3 * * *", "only allowed for day of month"),
    ("0 0 3 * * @", "not a value"),
])
def test_bad_expressions_say_which_field_is_wrong(expression, problem):
  with pytest.raises(CronError, match=problem.replace("*", r"\*")):
    check_cron(expression)
