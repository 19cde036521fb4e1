"""`--name=value` flags over dataclass fields: one parser, and one `--help`, for every CLI."""
import dataclasses
import inspect
import io
import textwrap
import tokenize
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


# The --help groups, in order; every flag of the pipeline, the trainer and the cluster is in
# exactly one (configs/flags_test.py). Flags of one CLI that are in no group (the standalone
# trainer's paths) are listed first, under the CLI's own heading.
FLAG_GROUPS = {
    "data": ("config", "dataset", "tfrecord_dir", "class_names", "image_dir",
             "skip_bad_images", "tfds_data_dir", "eval_fraction", "test_fraction",
             "schema_path", "num_classes"),
    "model": ("depth", "width_multiplier", "l2", "bn_l2", "input_conv_l2", "group_1_conv_l2",
              "group_2_conv_l2", "group_3_conv_l2", "dense_kernel_l2", "dense_bias_l2",
              "label_smoothing", "l2_per_train_example", "spectral_norm_bound"),
    "training": ("base_learning_rate", "one_minus_momentum", "lr_decay_epochs",
                 "lr_decay_ratio", "lr_warmup_epochs", "train_epochs", "train_steps",
                 "per_core_batch_size", "eval_batch_size", "seed", "log_every_steps",
                 "checkpoint_interval", "checkpoint_steps", "max_checkpoints_to_keep",
                 "distribution_strategy", "tpu", "mixed_precision", "steps_per_loop",
                 "op_determinism", "mode", "continuous_eval_timeout_secs", "warm_start",
                 "warm_start_exclude", "warm_start_epochs", "warm_start_lr_ratio"),
    "AugMix": ("augmix", "aug_count", "augmix_prob_coeff", "augmix_depth", "augmix_width",
               "augmix_severity", "augmix_jsd_weight", "augmix_online", "augmix_view_sets"),
    "evaluation and gate": (
        "num_bins", "temperature_fit", "validation_corruption_examples", "min_eval_examples",
        "min_eval_accuracy",
        "max_accuracy_drop", "max_eval_ece", "max_ece_increase", "max_eval_nll",
        "max_nll_increase", "min_corrupted_accuracy", "max_corrupted_accuracy_drop",
        "max_corrupted_nll", "max_corrupted_nll_increase", "max_corrupted_mean_ece",
        "max_corrupted_mean_ece_increase", "max_corrupted_ece", "max_corrupted_ece_increase",
        "corruptions", "examples_per_corruption",
        "corruption_workers",
        "ensemble_size", "hyper_trials", "ensemble_objective"),
    "run": ("pipeline_name", "output_dir", "enable_cache", "beam_workers",
            "beam_running_mode", "beam_in_memory_max_examples", "beam_runner",
            "beam_job_endpoint", "beam_environment_type", "beam_environment_config"),
    "cluster (Kubeflow)": (
        "image", "kubeflow_target", "vertex_project", "vertex_region", "machine_type",
        "accelerator_type", "accelerator_count", "replica_count", "dataflow_project",
        "dataflow_region", "dataflow_temp_location"),
    "cluster pods (Kubeflow)": (
        "trainer_cpu", "trainer_memory", "beam_cpu", "beam_memory", "credentials_secret",
        "credentials_secret_keys", "s3_endpoint", "s3_region", "trainer_node_selector",
        "trainer_tolerations", "image_pull_secrets"),
}
CONFIG_HELP = "the preset the other flags override: one of configs.PRESETS"


def field_help(cls) -> Dict[str, str]:
  """Each field's help, from the comments that document it where it is defined: its trailing
  comment, followed, for the first field under a comment block, by that block."""
  source = textwrap.dedent(inspect.getsource(cls))
  trailing: Dict[int, str] = {}
  block_lines: Dict[int, str] = {}
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.COMMENT:
      text = token.string.lstrip("#").strip()
      if token.line.strip().startswith("#"):
        block_lines[token.start[0]] = text
      else:
        trailing[token.start[0]] = text
  names = {f.name for f in dataclasses.fields(cls)}
  helps, block = {}, []
  for number, line in enumerate(source.splitlines(), start=1):
    if number in block_lines:
      block.append(block_lines[number])
      continue
    name = line.strip().split(":", 1)[0]
    if name in names:
      context = " ".join(block)
      helps[name] = " ".join([trailing.get(number, "")]
                             + ([context] if len(context.split()) > 3 else [])).strip()
    block = []
  return helps


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
                             subsequent_indent="      ")
  return "\n".join(lines)


def grouped(helps: Mapping[str, str], defaults: Mapping[str, Any],
            ungrouped_title: str = "") -> List[Tuple[str, List[Tuple[str, Any, str]]]]:
  """The flags in `defaults` by FLAG_GROUPS (those in no group first, under ungrouped_title)."""
  grouped_names = {name for names in FLAG_GROUPS.values() for name in names}
  sections = [(ungrouped_title, [(n, defaults[n], helps.get(n, "")) for n in defaults
                                 if n not in grouped_names])]
  for title, names in FLAG_GROUPS.items():
    sections.append((title, [(n, defaults[n], helps.get(n, "")) for n in names
                             if n in defaults]))
  return sections
