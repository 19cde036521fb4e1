"""The tf.distribute strategy and precision policy a run asks for; the global batch is
per_core_batch_size x replicas (docs/standalone_trainer.md, "Distribution").
"""
import contextlib
import dataclasses
import logging
import os
from typing import Iterator, Tuple

import tensorflow as tf
import tf_keras as keras

from trainer_module.config import TrainerConfig

log = logging.getLogger(__name__)


def make_strategy(config: TrainerConfig) -> tf.distribute.Strategy:
  kind = config.distribution.distribution_strategy
  if kind == "default":
    strategy = tf.distribute.get_strategy()
  elif kind == "mirrored":
    # The local GPUs; without GPUs, every logical CPU device (how the CPU tests run it).
    devices = (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))
    strategy = tf.distribute.MirroredStrategy([device.name for device in devices])
  elif kind == "multi_worker_mirrored":
    if "TF_CONFIG" not in os.environ:
      raise ValueError("distribution_strategy=multi_worker_mirrored needs the TF_CONFIG "
                       "environment variable describing the cluster and this worker's task.")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
  elif kind == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=config.distribution.tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
  else:
    raise ValueError(f"Unknown distribution_strategy {kind!r}.")
  log.info("Strategy %s: %d replica(s)%s.", kind, strategy.num_replicas_in_sync,
           "" if is_chief(strategy) else " (not the chief)")
  return strategy


BFLOAT16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of native bf16 units.


@dataclasses.dataclass(frozen=True)
class Precision:
  """The Keras policy a run trains in, and why it was chosen (logged, exported, reported)."""
  policy: str
  reason: str

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def cpu_bfloat16_units(cpuinfo: str = "/proc/cpuinfo") -> Tuple[str, ...]:
  """The native bfloat16 instruction sets this CPU reports (Linux; none found elsewhere)."""
  try:
    with open(cpuinfo) as f:
      lines = f.read().splitlines()
  except OSError:
    return ()
  flags = set()
  for line in lines:
    if line.startswith("flags"):
      flags.update(line.partition(":")[2].split())
  return tuple(flag for flag in BFLOAT16_CPU_FLAGS if flag in flags)


def onednn_enabled() -> bool:
  """Whether TensorFlow's oneDNN kernels are on (default on Linux x86; TF_ENABLE_ONEDNN_OPTS=0
  turns them off). Only they use the bf16 units: without them bfloat16 ops are emulated."""
  try:
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  return bool(_pywrap_util_port.IsMklEnabled())


def resolve_precision(config: TrainerConfig) -> Precision:
  """`mixed_precision=auto`: mixed_bfloat16 on TPUs and on CPUs whose bf16 units oneDNN
  drives, mixed_float16 on GPUs, float32 otherwise. Other values are taken as given."""
  if config.distribution.mixed_precision != "auto":
    return Precision(config.distribution.mixed_precision, "asked for (mixed_precision flag)")
  if config.distribution.distribution_strategy == "tpu":
    return Precision("mixed_bfloat16", "auto: TPU")
  if tf.config.list_physical_devices("GPU"):
    return Precision("mixed_float16", "auto: GPU")
  units = cpu_bfloat16_units()
  if units and onednn_enabled():
    return Precision("mixed_bfloat16", f"auto: CPU with native bfloat16 ({', '.join(units)}) "
                                       "and oneDNN")
  if units:
    return Precision("float32", f"auto: CPU has {', '.join(units)} but TensorFlow's oneDNN "
                                "kernels are off (TF_ENABLE_ONEDNN_OPTS=0)")
  return Precision("float32", "auto: CPU without native bfloat16 units")


def set_precision_policy(config: TrainerConfig) -> Precision:
  """Sets the global Keras policy the config resolves to; returns it."""
  precision = resolve_precision(config)
  keras.mixed_precision.set_global_policy(precision.policy)
  log.info("Precision policy %s (%s).", precision.policy, precision.reason)
  return precision


@contextlib.contextmanager
def precision_policy(config: TrainerConfig) -> Iterator[Precision]:
  """The global Keras policy the config resolves to, within the block (set_precision_policy),
  and the policy found before it again after it, however the block ends: TFX's LocalDagRunner
  runs every component in one process, so an EnsembleSelector after the trial Trainers would
  otherwise build its network under the last trial's mixed policy."""
  previous = keras.mixed_precision.global_policy()
  try:
    yield set_precision_policy(config)
  finally:
    keras.mixed_precision.set_global_policy(previous)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """The one worker that writes checkpoints, summaries and the model (others write to scratch)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  cluster = resolver.cluster_spec().as_dict()
  if task_type is None or task_type == "chief":
    return True
  return task_type == "worker" and task_id == 0 and "chief" not in cluster
