"""The tf.distribute strategy and precision policy a run asks for.

The global batch is per_core_batch_size x replicas, as in the original script; every replica
sees its own slice of each global batch (see data.py), so a run on N devices follows the same
example order as a run on one.
"""
import logging
import os

import tensorflow as tf
import tf_keras as keras

from trainer_module.config import TrainerConfig

log = logging.getLogger(__name__)


def make_strategy(config: TrainerConfig) -> tf.distribute.Strategy:
  kind = config.distribution_strategy
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
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=config.tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
  else:
    raise ValueError(f"Unknown distribution_strategy {kind!r}.")
  log.info("Strategy %s: %d replica(s)%s.", kind, strategy.num_replicas_in_sync,
           "" if is_chief(strategy) else " (not the chief)")
  return strategy


def set_precision_policy(config: TrainerConfig) -> None:
  """mixed_bfloat16 on TPUs, mixed_float16 elsewhere (GPUs), float32 unless asked."""
  if not config.mixed_precision:
    policy = "float32"
  elif config.distribution_strategy == "tpu":
    policy = "mixed_bfloat16"
  else:
    policy = "mixed_float16"
  keras.mixed_precision.set_global_policy(policy)


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
