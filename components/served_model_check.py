"""Checks the candidate as a serving client sees it, before the Pusher may publish it: the part
of TFX's InfraValidator that needs no TF Serving binary (docs/pipeline.md, ServedModelCheck).
"""
import json
import logging
import os
import subprocess
import sys
from typing import List, Optional

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import path_utils

from components import evaluation_set, pusher, serving_client, serving_versions, tfma_results
from components.calibration_metrics import ACCURACY_NAME
from storage.object_storage import is_object_store_uri
from trainer_module.features import PROBABILITIES_KEY

log = logging.getLogger(__name__)

RESULT_FILE = "served_check.json"  # In the blessing's directory: what the check found.
ACCURACY_TOLERANCE = 0.01  # Served against the Evaluator's accuracy on the same examples.
BLESSED_KEY = "blessed"  # What TFX's Pusher reads (components/util/model_utils.py).
_MARKERS = {True: "INFRA_BLESSED", False: "INFRA_NOT_BLESSED"}  # As TFX's InfraValidator.


def checked_split(split_names: List[str]) -> str:
  """The held-out test split when the input has one, else the eval split."""
  return evaluation_set.TEST if evaluation_set.TEST in split_names else evaluation_set.EVAL


def served_scores(model_dir: str, examples_glob: str) -> dict:
  """serving_client's result, in a process of its own; {"error": ...} when it fails."""
  result = subprocess.run([sys.executable, "-m", "components.serving_client", model_dir,
                           examples_glob], capture_output=True, text=True)
  if result.returncode != 0:
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return {"error": lines[-1] if lines else f"exit status {result.returncode}"}
  return json.loads(result.stdout.strip().splitlines()[-1])


def problems(scores: dict, evaluator_accuracy: Optional[float], tolerance: float,
             split: str) -> List[str]:
  """Why the candidate must not be served (empty: it may)."""
  if "error" in scores:
    return [f"the `{serving_client.SIGNATURE}` signature failed on serialized tf.Examples: "
            f"{scores['error']}"]
  if not scores["examples"]:
    return [f"the {split} split holds no examples: the candidate could not be served any, so "
            "it is not checked as a serving client sees it"]
  found = []
  if scores["non_finite"]:
    found.append(f"{scores['non_finite']} of {scores['examples']} examples got probabilities "
                 "that are not finite")
  if scores["not_normalised"]:
    found.append(f"{scores['not_normalised']} of {scores['examples']} examples got "
                 f"probabilities that do not sum to 1 (within {serving_client.SUM_TOLERANCE})")
  if evaluator_accuracy is None:
    found.append("the Evaluator recorded no accuracy on this split to compare with")
  elif abs(scores["accuracy"] - evaluator_accuracy) > tolerance:
    found.append(f"served accuracy {scores['accuracy']:.4f} differs from the Evaluator's "
                 f"{evaluator_accuracy:.4f} on the same split by more than {tolerance}")
  return found


@component
def ServedModelCheck(  # pylint: disable=invalid-name
    model: InputArtifact[standard_artifacts.Model],
    examples: InputArtifact[standard_artifacts.Examples],
    evaluation: InputArtifact[standard_artifacts.ModelEvaluation],
    infra_blessing: OutputArtifact[standard_artifacts.InfraBlessing],
    accuracy_tolerance: Parameter[float] = ACCURACY_TOLERANCE) -> None:
  """Blesses the candidate for the Pusher only if it serves raw tf.Examples correctly."""
  split = checked_split(artifact_utils.decode_split_names(examples.split_names))
  try:
    values = tfma_results.load_metrics(evaluation.uri)
  except Exception as error:
    raise ValueError(f"ServedModelCheck: the Evaluator's output {evaluation.uri} (input "
                     f"'evaluation') holds no readable metrics: {error}") from error
  evaluator_accuracy = tfma_results.metric(values, ((evaluation_set.EVAL_SET_KEY, split),),
                                           PROBABILITIES_KEY, ACCURACY_NAME)
  scores = served_scores(path_utils.serving_model_path(model.uri),
                         os.path.join(artifact_utils.get_split_uri([examples], split), "*"))
  found = problems(scores, evaluator_accuracy, accuracy_tolerance, split)
  passed = not found
  result = {"passed": passed, "split": split, "accuracy": scores.get("accuracy"),
            "correct": scores.get("correct", 0), "examples": scores.get("examples", 0),
            "evaluator_accuracy": evaluator_accuracy, "tolerance": accuracy_tolerance,
            "problems": found}
  if not is_object_store_uri(infra_blessing.uri):  # Object stores have no directories.
    fileio.makedirs(infra_blessing.uri)
  with fileio.open(os.path.join(infra_blessing.uri, RESULT_FILE), "w") as f:
    f.write(json.dumps(result, indent=1))
  with fileio.open(os.path.join(infra_blessing.uri, _MARKERS[passed]), "w") as f:
    f.write("")
  infra_blessing.set_int_custom_property(BLESSED_KEY, int(passed))
  record_training_data(examples, infra_blessing)
  log.info("Served-model check %s on the %s split: %s", "passed" if passed else "FAILED", split,
           "; ".join(found) or f"accuracy {scores['accuracy']:.4f}")


def record_training_data(examples, blessing) -> None:
  """Names on the blessing the data the candidate was trained on, for the Pusher to record with
  the version it publishes: ExampleGen's span, version and input fingerprint of `examples`
  (0, 0 and none when the input pattern has no span) and the window of spans, when the Examples
  carry one (serving_versions.examples_data)."""
  data = serving_versions.examples_data(examples)
  blessing.set_int_custom_property(pusher.TRAINED_SPAN_KEY, data[serving_versions.SPAN_KEY])
  blessing.set_int_custom_property(pusher.TRAINED_VERSION_KEY,
                                   data[serving_versions.DATA_VERSION_KEY])
  for key, name in ((pusher.TRAIN_WINDOW_KEY, serving_versions.TRAIN_WINDOW_KEY),
                    (pusher.TRAINED_FINGERPRINT_KEY, serving_versions.FINGERPRINT_KEY)):
    if name in data:
      blessing.set_string_custom_property(key, data[name])


def read_result(blessing_uri: str) -> dict:
  """What a ServedModelCheck wrote into its blessing."""
  with fileio.open(os.path.join(blessing_uri, RESULT_FILE), "r") as f:
    return json.loads(f.read())
