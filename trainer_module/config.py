"""The training configuration: one definition for the TFX Trainer and the standalone trainer.

Field names follow Uncertainty Baselines' `baselines/cifar/deterministic.py` (WRN-28-10 on
CIFAR-10), so users of that script recognise them. The defaults are the recommended settings,
for every runner and the standalone trainer alike: that script's recipe (size, optimiser,
schedule) with this project's robustness and calibration (AugMix with the JSD loss, spectrally
normalised convolutions, SNGP's output layer, each image centred, a temperature per input by
feature distance and detail; docs/robustness.md says what each does and how it was chosen).
A preset in configs/ states only what differs from them.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, List, Mapping, Optional, Tuple

import numpy as np

from configs import groups
from trainer_module.calibration import registry as calibration_methods

# Keys of the TFX custom_config the pipeline hands the Trainer (producers: pipeline/, kubeflow/;
# consumer: trainer_module.tfx_trainer). Transform's is preprocessing.TRANSFORM_OPTIONS_KEY.
TRAINER_CONFIG_KEY = "trainer"  # TrainerConfig.to_dict() of the Trainer (trial).
FINGERPRINT_KEY = "trainer_module_fingerprint"  # Invalidates the cache when the code changes.


def require_finite(group) -> None:
  """inf passes every bound of a group's rules, and diverges: refused first, by field."""
  for field in dataclasses.fields(group):
    value = getattr(group, field.name)
    require(not isinstance(value, float) or math.isfinite(value), field.name, value,
            "must be a finite number")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Model: the Wide ResNet, its regularisation, spectral normalisation and output layer."""
  depth: int = 28  # Wide ResNet depth, 6n+4 (28 in WRN-28-10).
  width_multiplier: int = 10  # Channel widening factor k (10 in WRN-28-10).
  num_classes: int = 10  # Classes of the label (an image_dir run: its class folders).
  # Regularisation; each per-group L2 falls back to `l2` when None.

  l2: float = 2e-4  # L2 of every parameter group without its own.
  bn_l2: Optional[float] = None  # L2 of batch-norm scales and offsets.
  input_conv_l2: Optional[float] = None  # L2 of the first convolution.
  group_1_conv_l2: Optional[float] = None  # L2 of the first block group's convolutions.
  group_2_conv_l2: Optional[float] = None  # L2 of the second block group's convolutions.
  group_3_conv_l2: Optional[float] = None  # L2 of the third block group's convolutions.
  dense_kernel_l2: Optional[float] = None  # L2 of the logits layer's kernel.
  dense_bias_l2: Optional[float] = None  # L2 of the logits layer's bias.
  label_smoothing: float = 0.0  # Label smoothing of the cross-entropy.
  # Spectral normalisation as in DDU and SNGP (model.py SpectralNormConv2D), which keeps feature
  # distances meaningful for the calibration's map; UB's SNGP bounds each convolution by 6, DDU
  # by 3. 0.25 was the best bound on the validation shift (docs/robustness.md).
  spectral_norm_bound: float = 0.25  # Largest spectral norm of each convolution (0 = off).
  # Before the first convolution (model.py), centering makes each image blind to a global
  # change of brightness (its mean over its pixels subtracted); none feeds it as Transform
  # normalised it, as UB does (docs/robustness.md, "Per-image normalisation").
  per_image_normalization: str = "centering"  # none or centering.
  # dense: a dense layer, as UB's; sngp: SNGP's random-feature Gaussian process (sngp.py),
  # served as mean-field logits / sqrt(1 + factor * variance), its kernel scale chosen for
  # 128-wide features (docs/robustness.md, "The output layer").
  output_layer: str = "sngp"  # The output layer (model.py): dense or sngp.
  # SNGP's output layer. Why the defaults differ from UB's (1024 features, length-scale^2 2,
  # factor 25): docs/robustness.md.

  sngp_random_features: int = 128  # Random Fourier features of the GP.
  sngp_kernel_scale: float = 128.0  # The RBF kernel's squared length-scale.
  sngp_ridge_penalty: float = 1.0  # Ridge of the Laplace precision (the prior's).
  sngp_mean_field_factor: float = math.pi / 8  # The mean-field logits' factor (lambda).
  # When true, the L2s of HYPER_L2_GROUPS are coefficients c, trained with c / n, n = the train
  # split's example count (known only when the Trainer runs).
  l2_per_train_example: bool = False  # L2s per train example (hyper-deep ensemble trials).

  def __post_init__(self):
    require_finite(self)
    require(self.depth >= 10 and (self.depth - 4) % 6 == 0, "depth", self.depth,
            "must be 6n+4 with n >= 1 (10, 16, 22, 28, ...)")
    require(self.width_multiplier >= 1, "width_multiplier", self.width_multiplier, "must be >= 1")
    require(self.num_classes >= 2, "num_classes", self.num_classes, "must be >= 2")
    for name in ("l2",) + L2_GROUPS:
      value = getattr(self, name)
      require(value is None or value >= 0, name, value, "must be >= 0")
    if self.l2_per_train_example:
      unset = [name for name in HYPER_L2_GROUPS if getattr(self, name) is None]
      require(not unset, "l2_per_train_example", True,
              f"needs every per-example L2 coefficient set; unset: {unset}")
    require(self.spectral_norm_bound >= 0, "spectral_norm_bound", self.spectral_norm_bound,
            "must be >= 0 (0 = no spectral normalisation)")
    require(self.per_image_normalization in PER_IMAGE_NORMALIZATIONS,
            "per_image_normalization", self.per_image_normalization,
            f"must be one of {PER_IMAGE_NORMALIZATIONS}")
    require(self.output_layer in OUTPUT_LAYERS, "output_layer", self.output_layer,
            f"must be one of {OUTPUT_LAYERS}")
    require(self.sngp_random_features >= 1, "sngp_random_features", self.sngp_random_features,
            "must be >= 1")
    for name in ("sngp_kernel_scale", "sngp_ridge_penalty"):
      require(getattr(self, name) > 0, name, getattr(self, name), "must be > 0")
    require(self.sngp_mean_field_factor >= 0, "sngp_mean_field_factor",
            self.sngp_mean_field_factor, "must be >= 0 (0 = the posterior mode's logits)")
    require(0.0 <= self.label_smoothing <= 1.0, "label_smoothing", self.label_smoothing,
            "must be in [0, 1]")

  def group_l2(self, name: str) -> float:
    """The L2 coefficient of one parameter group, falling back to `l2`."""
    value = getattr(self, name)
    return self.l2 if value is None else value

  def for_train_examples(self, count: int) -> "ModelConfig":
    """The model a run trains: per-example L2 coefficients divided by `count`."""
    if not self.l2_per_train_example:
      return self
    return dataclasses.replace(self, l2_per_train_example=False,
                               **{name: self.group_l2(name) / count for name in HYPER_L2_GROUPS})


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """Training: optimisation, schedule, batches, seed, checkpoints, mode and warm start."""
  base_learning_rate: float = 0.1  # Learning rate per 128 examples, scaled by the total batch.
  one_minus_momentum: float = 0.1  # 1 - Nesterov momentum.
  # A comma list, given for a 200-epoch schedule and rescaled to train_epochs.
  lr_decay_epochs: Tuple[int, ...] = (60, 120, 160)  # Epochs the learning rate decays at.
  lr_decay_ratio: float = 0.2  # Learning rate factor at each decay epoch.
  lr_warmup_epochs: int = 1  # Epochs of linear warm-up.
  train_epochs: int = 200  # Epochs the schedule spans.
  # None: train for train_epochs. When set, the schedule still spans train_epochs.
  train_steps: Optional[int] = None  # Stop after this many steps (smoke runs).
  per_core_batch_size: int = 64  # Training batch per replica.
  eval_batch_size: int = 256  # Evaluation batch.
  seed: int = 42  # Seeds initialisation, shuffling and AugMix.
  log_every_steps: int = 20  # Progress line every this many steps.
  # Checkpoints: every checkpoint_interval epochs as in the original (-1 never), also every
  # checkpoint_steps steps when > 0, and always when the process is told to stop (SIGTERM).

  checkpoint_interval: int = 25  # Checkpoint every this many epochs (-1 never).
  checkpoint_steps: int = 0  # Checkpoint also every this many steps (0 never).
  max_checkpoints_to_keep: int = 3  # Newest checkpoints kept.
  mode: str = "train_and_eval"  # What to run: train, eval, train_and_eval or continuous_eval.
  # continuous_eval also stops after the last step's checkpoint.
  continuous_eval_timeout_secs: int = 3600  # Seconds continuous_eval waits for a new checkpoint.
  # Warm start (trainer_module/warm_start.py): a warm-started run trains warm_start_epochs on
  # the fine-tuning schedule (warm-up, cosine decay from base_learning_rate): restored variables
  # at warm_start_lr_ratio x that rate, freshly initialised ones (a new head) at the full rate.

  # none; production (pipeline only: the model in production, when there is one); or a
  # checkpoint directory or exported SavedModel.
  warm_start: str = "none"  # The weights training starts from.
  # Variables named by one of these prefixes ("head": the logits layer) start freshly
  # initialised.
  warm_start_exclude: Tuple[str, ...] = ()  # Variable prefixes not restored (comma list).
  warm_start_epochs: Optional[int] = None  # Fine-tuning epochs (None: train_epochs / 4).
  warm_start_lr_ratio: float = 0.1  # Restored variables' learning rate / the schedule's.

  def __post_init__(self):
    require_finite(self)
    require(0 <= self.seed <= 2**63 - 1, "seed", self.seed,
            "must be in [0, 2**63 - 1]: numpy's and TensorFlow's random generators take a "
            "non-negative int64")
    require(self.base_learning_rate > 0, "base_learning_rate", self.base_learning_rate,
            "must be > 0")
    require(0.0 < self.one_minus_momentum <= 1.0, "one_minus_momentum",
            self.one_minus_momentum, "must be in (0, 1]")
    require(list(self.lr_decay_epochs) == sorted(self.lr_decay_epochs)
            and all(e > 0 for e in self.lr_decay_epochs), "lr_decay_epochs",
            self.lr_decay_epochs, "must be increasing positive epochs")
    require(0.0 < self.lr_decay_ratio <= 1.0, "lr_decay_ratio", self.lr_decay_ratio,
            "must be in (0, 1]")
    require(self.lr_warmup_epochs >= 0, "lr_warmup_epochs", self.lr_warmup_epochs,
            "must be >= 0")
    require(self.train_epochs > 0, "train_epochs", self.train_epochs, "must be > 0")
    require(self.train_steps is None or self.train_steps > 0, "train_steps", self.train_steps,
            "must be > 0 (or unset to train for train_epochs)")
    require(self.per_core_batch_size > 0, "per_core_batch_size", self.per_core_batch_size,
            "must be > 0")
    require(self.eval_batch_size > 0, "eval_batch_size", self.eval_batch_size, "must be > 0")
    require(self.log_every_steps > 0, "log_every_steps", self.log_every_steps, "must be > 0")
    require(self.checkpoint_interval == -1 or self.checkpoint_interval > 0,
            "checkpoint_interval", self.checkpoint_interval, "must be > 0 epochs, or -1 (never)")
    require(self.checkpoint_steps >= 0, "checkpoint_steps", self.checkpoint_steps,
            "must be >= 0 (0 = only every checkpoint_interval epochs)")
    require(self.max_checkpoints_to_keep >= 1, "max_checkpoints_to_keep",
            self.max_checkpoints_to_keep, "must be >= 1")
    require(self.mode in MODES, "mode", self.mode, f"must be one of {MODES}")
    require(self.continuous_eval_timeout_secs > 0, "continuous_eval_timeout_secs",
            self.continuous_eval_timeout_secs, "must be > 0")
    require(bool(self.warm_start.strip()), "warm_start", self.warm_start,
            "must be none, production or a checkpoint / SavedModel path")
    require(all(prefix.strip() for prefix in self.warm_start_exclude), "warm_start_exclude",
            self.warm_start_exclude, "must be variable-name prefixes or groups (head)")
    require(self.warm_start_epochs is None or self.warm_start_epochs > 0, "warm_start_epochs",
            self.warm_start_epochs, "must be > 0 (or unset for a quarter of train_epochs)")
    require(0.0 < self.warm_start_lr_ratio <= 1.0, "warm_start_lr_ratio",
            self.warm_start_lr_ratio, "must be in (0, 1]")

  @property
  def fine_tuning_epochs(self) -> int:
    """Epochs of a warm-started run."""
    return self.warm_start_epochs or max(1, self.train_epochs // 4)

  def scaled_decay_epochs(self) -> Tuple[int, ...]:
    """lr_decay_epochs are given for a 200-epoch run; rescale them to train_epochs."""
    return tuple(e * self.train_epochs // 200 for e in self.lr_decay_epochs)


@dataclasses.dataclass(frozen=True)
class DistributionConfig:
  """Distribution: the devices and strategy, TPU, precision, steps per host call, determinism."""
  # default (one device), mirrored (the local GPUs), multi_worker_mirrored (workers from
  # TF_CONFIG) or tpu (at `tpu`, "local" for a TPU VM).
  distribution_strategy: str = "default"  # Where and how to train.
  tpu: str = ""  # TPU address for distribution_strategy=tpu.
  # auto: mixed_bfloat16 on TPUs and on CPUs with native bfloat16 units, mixed_float16 on
  # GPUs, float32 otherwise (distribution.resolve_precision_policy).
  mixed_precision: str = "auto"  # Policy: auto, float32, mixed_float16 or mixed_bfloat16.
  # A tf.range loop inside one tf.function cuts the host round trip that dominates on TPUs;
  # None: 1 on CPUs, 10 on GPUs, 100 on TPUs. Loops end at each log, epoch and checkpoint
  # step, so raise log_every_steps with it.
  steps_per_loop: Optional[int] = None  # Training steps per host call.
  op_determinism: bool = False  # Bit-identical reruns (tf.config op determinism; slower).

  def __post_init__(self):
    require(self.distribution_strategy in DISTRIBUTION_STRATEGIES, "distribution_strategy",
            self.distribution_strategy, f"must be one of {DISTRIBUTION_STRATEGIES}")
    require(bool(self.tpu) == (self.distribution_strategy == "tpu"), "tpu", self.tpu,
            "is the TPU address (or 'local'), required with distribution_strategy=tpu only")
    require(self.mixed_precision in PRECISION_CHOICES, "mixed_precision", self.mixed_precision,
            f"must be one of {PRECISION_CHOICES}")
    require(self.steps_per_loop is None or self.steps_per_loop >= 1, "steps_per_loop",
            self.steps_per_loop, "must be >= 1 (or unset for the device's default)")


@dataclasses.dataclass(frozen=True)
class AugMixConfig:
  """AugMix (Hendrycks et al. 2020): views of each training image, mixed chains of operations."""
  # Named as in the original script (off there); on with two views and the JSD loss, the most
  # robust setting measured (docs/robustness.md, "AugMix").
  augmix: bool = True  # Train on AugMix views (Hendrycks et al. 2020).
  aug_count: int = 2  # AugMix views per training image (>= 2: with the JSD loss).
  augmix_prob_coeff: float = 0.5  # Dirichlet and Beta concentration alpha.
  augmix_depth: int = -1  # Operations per chain; -1 samples it in [1, 3].
  augmix_width: int = 3  # Chains mixed per view.
  augmix_severity: int = 3  # Upper bound of operation levels (the paper's CIFAR setting).
  augmix_jsd_weight: float = 12.0  # Jensen-Shannon consistency weight, when aug_count >= 2.
  augmix_online: bool = False  # Fresh views each epoch in the Trainer instead of in Transform.
  # Epoch e trains on set e mod augmix_view_sets (set s = online AugMix's views of epoch s,
  # rounded to uint8). Not used with augmix_online.
  augmix_view_sets: int = 4  # View sets per image that Transform writes.

  def __post_init__(self):
    require_finite(self)
    require(self.aug_count >= 0, "aug_count", self.aug_count, "must be >= 0")
    require(self.augmix_prob_coeff > 0, "augmix_prob_coeff", self.augmix_prob_coeff,
            "must be > 0")
    require(self.augmix_depth == -1 or 1 <= self.augmix_depth <= 3, "augmix_depth",
            self.augmix_depth, "must be in [1, 3], or -1 to sample it")
    require(self.augmix_width >= 1, "augmix_width", self.augmix_width, "must be >= 1")
    require(1 <= self.augmix_severity <= 10, "augmix_severity", self.augmix_severity,
            "must be in [1, 10]")
    require(self.augmix_view_sets >= 1, "augmix_view_sets", self.augmix_view_sets,
            "must be >= 1")
    require(self.augmix_jsd_weight >= 0, "augmix_jsd_weight", self.augmix_jsd_weight,
            "must be >= 0")

  @property
  def num_views(self) -> int:
    """AugMix views per training image (0 when AugMix is off)."""
    return self.aug_count if self.augmix else 0


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
  """Calibration: the temperature fit and the calibration error's bins."""
  # distance_detail_curve: a T per input that grows with its feature distance from the
  # training data and falls with the fine detail the image holds, fitted on the clean eval
  # images and the eval images under the validation corruptions (never the 15 evaluated ones),
  # never worse calibrated than the raw softmax under them; for a spectrally normalised
  # network. validation_corruptions: one T, the clean NLL minimum among temperatures at which
  # every validation corruption x severity is no worse than raw; for a network without
  # spectral normalisation, or to serve one T. clean: one T from the clean eval split alone
  # (Guo et al. 2017), a baseline (docs/robustness.md, "The three choices").
  temperature_fit: str = "distance_detail_curve"  # How temperature scaling
                                                  # (trainer_module/calibration/) fits T.
  # A slice is one validation corruption x severity: 9 x 5 slices, the same images in each.
  validation_corruption_examples: int = 50  # Eval images per validation slice.
  num_bins: int = 15  # Equal-width confidence bins of the expected calibration error.

  def __post_init__(self):
    require(self.temperature_fit in calibration_methods.NAMES, "temperature_fit",
            self.temperature_fit, f"must be one of {calibration_methods.NAMES}")
    require(self.validation_corruption_examples >= 1, "validation_corruption_examples",
            self.validation_corruption_examples, "must be >= 1")
    require(self.num_bins > 0, "num_bins", self.num_bins, "must be > 0")


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """The trainer's settings, in groups; `--help` lists each group's flags under its heading."""
  model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
  training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
  distribution: DistributionConfig = dataclasses.field(default_factory=DistributionConfig)
  augmentation: AugMixConfig = dataclasses.field(default_factory=AugMixConfig)
  calibration: CalibrationConfig = dataclasses.field(default_factory=CalibrationConfig)

  def transform_options(self) -> dict:
    """What Transform needs: only these fields, so other changes keep its cache valid."""
    augmix = self.augmentation
    written_views = 0 if augmix.augmix_online else augmix.num_views
    return {"num_views": written_views,
            "view_sets": augmix.augmix_view_sets if written_views else 1,
            "emit_augmix_inputs": augmix.augmix_online and augmix.num_views > 0,
            "seed": self.training.seed, "augmix_width": augmix.augmix_width,
            "augmix_depth": augmix.augmix_depth, "augmix_prob_coeff": augmix.augmix_prob_coeff,
            "augmix_severity": augmix.augmix_severity}

  def for_train_examples(self, count: int) -> "TrainerConfig":
    """The config a run trains with: per-example L2 coefficients divided by `count`."""
    model = self.model.for_train_examples(count)
    return self if model is self.model else dataclasses.replace(self, model=model)

  def replace(self, **fields) -> "TrainerConfig":
    """A copy with leaf fields (flat names) replaced; each group given one is validated."""
    return groups.build(type(self), fields, self)

  def to_dict(self) -> dict:
    """Every leaf field by flat name: the Trainer's custom_config and the checkpoints' record."""
    return groups.flatten(self)

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> "TrainerConfig":
    """The config `to_dict` (or JSON of it) wrote, or any leaf fields over the defaults."""
    values = dict(values)
    for name in ("lr_decay_epochs", "warm_start_exclude"):
      if name in values:
        values[name] = tuple(values[name])
    unknown = set(values) - set(groups.leaf_paths(cls))
    if unknown:
      raise ValueError(f"Unknown trainer config field(s): {sorted(unknown)}")
    return groups.build(cls, values)


NO_WARM_START, WARM_START_FROM_PRODUCTION = "none", "production"
OUTPUT_LAYERS = ("dense", "sngp")
PER_IMAGE_NORMALIZATIONS = ("none", "centering")
DISTRIBUTION_STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")
PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")  # Index = checkpoint code.
PRECISION_CHOICES = ("auto",) + PRECISION_POLICIES
MODES = ("train", "eval", "train_and_eval", "continuous_eval")
L2_GROUPS = ("bn_l2", "input_conv_l2", "group_1_conv_l2", "group_2_conv_l2",
            "group_3_conv_l2", "dense_kernel_l2", "dense_bias_l2")
# What hyper-deep ensemble trials draw (UB's cifar10_rand_search_sweep.py); bn_l2 stays fixed.
HYPER_L2_GROUPS = L2_GROUPS[1:]
HYPER_L2_RANGE = (1e-2, 1e2)  # Times 1/n: log-uniform in [1e-2/n, 1e2/n].
HYPER_LABEL_SMOOTHING_RANGE = (1e-5, 0.2)
HYPER_SEED_RANGE = (1, 10_000)  # [low, high), as UB's sweep.
# What greedy member selection minimises: on the eval split NLL, -accuracy, or NLL - accuracy;
# shift_nll: the NLL over the eval split and each validation corruption x severity slice.
SHIFT_NLL = "shift_nll"
ENSEMBLE_OBJECTIVES = ("nll", "acc", "nll-acc", SHIFT_NLL)
# The objective's default, for the pipeline and the ensemble command alike: the clean eval NLL
# of the digits' served members is one or two images' worth (docs/ensembles_and_transfer.md).
DEFAULT_ENSEMBLE_OBJECTIVE = SHIFT_NLL


def hyper_trials(base: TrainerConfig, count: int) -> List[TrainerConfig]:
  """Hyper-deep ensemble trials: trial 0 is `base`; each other draws the per-group L2s
  (log-uniform per train example), label smoothing (log-uniform) and a seed, from a generator
  seeded by (base's seed, trial), so the draws are the same on every run and machine."""
  trials = [base]
  for trial in range(1, count):
    rng = np.random.default_rng([base.training.seed, trial])

    def log_uniform(low, high):
      return float(np.exp(rng.uniform(np.log(low), np.log(high))))

    l2s = {name: log_uniform(*HYPER_L2_RANGE) for name in HYPER_L2_GROUPS}
    trials.append(base.replace(
        **l2s, l2_per_train_example=True, bn_l2=base.model.group_l2("bn_l2"),
        label_smoothing=log_uniform(*HYPER_LABEL_SMOOTHING_RANGE),
        seed=int(rng.integers(*HYPER_SEED_RANGE))))
  return trials


def require(condition: bool, name: str, value: Any, rule: str) -> None:
  """The one check behind every config rule: a ValueError that names the field and the value."""
  if not condition:
    raise ValueError(f"Invalid config value {name}={value!r}: {rule}.")
