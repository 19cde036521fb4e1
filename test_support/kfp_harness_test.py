"""What `make kubeflow-local` (python -m test_support.kfp_harness) says and exits with when its
run pushed nothing: a run with nothing new to train on did its job; a refused candidate did not."""
import json
import os

import pytest

from test_support import kfp_harness

SKIPPED = {"train": 0.0, "reason": "span 20261201 already in production as version 3; nothing "
                                  "new to train on"}
TRAINED = {"train": 1.0, "reason": "no model in production: training on span 20261201"}


@pytest.mark.parametrize("decision, blessing, pushed, status, line", [
    (SKIPPED, None, None, 0,
     "nothing pushed: span 20261201 already in production as version 3; nothing new to train"),
    (TRAINED, {"blessed": 1.0}, {"pushed": 0.0, "already_serving": "s3://b/serving/3"}, 0,
     "nothing pushed: the blessed model already serves as s3://b/serving/3"),
    (TRAINED, {"blessed": 1.0}, {"pushed": 0.0, "refused_for_drift": json.dumps(
        ["mean_brightness moved: 0.2 > 0.05"])}, 1,
     "none: the drift check blocked the push (--block_on_drift): mean_brightness moved"),
    (TRAINED, {"blessed": 0.0}, {"pushed": 0.0}, 1,
     "none: the Evaluator did not bless the candidate"),
    (None, None, None, 1, "none: the run pushed nothing"),
])
def test_a_run_that_pushed_nothing_exits_0_only_when_it_had_nothing_to_push(
    decision, blessing, pushed, status, line):
  got_status, got_line = kfp_harness.nothing_pushed(decision, blessing, pushed)
  assert got_status == status
  assert got_line.startswith("pushed model:   ") and line in got_line


# As TFX compiles them: component names without kfp's "comp-" prefix.
SPEC = {"root": {"dag": {"tasks": {task: {"componentRef": {"name": task}} for task in (
    "SpanCheck", "Evaluator", "Pusher")}}}}


def _executor_output(root, run, task, key, metadata):
  """An executor output file where kfp.local keeps it: the task root is the component name
  less its first five characters (kfp/local/executor_input_utils.py)."""
  task_root = os.path.join(root, run, task[len("comp-"):])
  os.makedirs(task_root)
  with open(os.path.join(task_root, "executor_output.json"), "w") as f:
    json.dump({"artifacts": {key: {"artifacts": [{"metadata": metadata}]}}}, f)


def test_the_kfp_local_outcome_is_read_from_the_newest_runs_executor_outputs(tmp_path):
  root = str(tmp_path / "pipeline_root")
  _executor_output(root, "p-2026-12-01-00-00-00-000001", "SpanCheck", "decision", TRAINED)
  _executor_output(root, "p-2026-12-01-00-00-00-000001", "Evaluator", "blessing",
                   {"blessed": 0})
  older = os.path.join(root, "p-2026-12-01-00-00-00-000001")
  os.utime(older, (1, 1))
  _executor_output(root, "p-2026-12-02-00-00-00-000001", "SpanCheck", "decision", SKIPPED)
  found = kfp_harness._kfp_local_outcome_metadata(root, SPEC)  # pylint: disable=protected-access
  assert found == {"decision": SKIPPED, "blessing": None, "pushed": None}
  assert kfp_harness.nothing_pushed(**found)[0] == 0
  assert kfp_harness._kfp_local_outcome_metadata(  # pylint: disable=protected-access
      str(tmp_path / "none"), SPEC) == {"decision": None, "blessing": None, "pushed": None}


def test_the_harness_outcome_is_read_from_its_metadata_as_the_driver_hands_it_over(tmp_path):
  import types
  metadata = kfp_harness.Metadata(str(tmp_path / "mlmd.json"))
  decision = metadata.record_artifact("decision", {"uri": "s3://b/d", "type": {},
                                                   "metadata": {"train": 0, "reason": "r"}})
  tasks = {"SpanCheck": kfp_harness.BackendTaskRun("SpanCheck", None, {"decision": decision},
                                                   {}, False, 1.0),
           "Evaluator": kfp_harness.BackendTaskRun("Evaluator", None, {}, {}, False, 0.0,
                                                   skipped="upstream task was skipped")}
  found = kfp_harness._harness_outcome_metadata(  # pylint: disable=protected-access
      types.SimpleNamespace(metadata=metadata), kfp_harness.PipelineRun("r", "s3://b/r", tasks, 1))
  assert found["blessing"] is None and found["pushed"] is None
  assert (found["decision"]["train"], found["decision"]["reason"]) == (0.0, "r")
  assert kfp_harness.nothing_pushed(**found) == (0, "pushed model:   nothing pushed: r")
