"""Runtime parameters of the compiled pipeline: what a user may change per run without
recompiling. Each one is an execution property its component reads."""
TRAINER_CONFIG_PARAMETER = "trainer_config"  # The Trainer's custom_config, as JSON.
# ImportExampleGen's input_base (dataset=tfrecord): the folder, or of a span pattern the folder
# above its first placeholder.
DATA_ROOT_PARAMETER = "data_root"
# With a span pattern in image_dir or tfrecord_dir: the span (or date YYYY-MM-DD) the run reads;
# empty: the newest. A recurring run may pass [[ScheduledTime.2006-01-02]] (KFP backend 2.16.0+).
SPAN_PARAMETER = "span"


def trainer_config_parameter(trial: int) -> str:
  """The runtime parameter holding a trial Trainer's custom_config (trial 0: the usual one)."""
  return TRAINER_CONFIG_PARAMETER if trial == 0 else f"{TRAINER_CONFIG_PARAMETER}_trial_{trial}"
