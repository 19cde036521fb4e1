"""Warm start and transfer on the embedded digits, with the standalone trainer as it runs.

The digits preset's size (WRN-16-2, 15 epochs, batch 64) of Uncertainty Baselines' plain network
(test_support/tiny_config.PLAIN: no AugMix, spectral normalisation or SNGP layer) on the pipeline's
digits train/eval split (split by key as ImageDatasetExampleGen does; one Transform pass over
train + eval):

1. scratch: 15 epochs from scratch, exported: "the model in production".
2. warm: warm_start=<that SavedModel> for warm_start_epochs (default: a quarter of 15 = 3)
   on the fine-tuning schedule. Goal: its eval accuracy >= and eval NLL <= production's in at
   most a quarter of the from-scratch steps. The scratch run's own eval after the same number
   of epochs is printed beside it.
3. transfer: digits 5-9 relabelled 0-4 (num_classes=5), for each of `--transfer_steps` step
   counts, from scratch and warm-started from the 10-class model with warm_start_exclude=head:
   at the default (warm_start_lr_ratio 0.1: restored variables at a tenth of the rate, the
   fresh head at the full rate) and with every variable at the full rate (ratio 1).

Metrics are the trainer's final eval (uncalibrated logits). Prints one table; --keep keeps the
work directory.

  .venv/bin/python bench/warm_start.py [--transfer_steps 10,30]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import trainer_module  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import tensorflow as tf  # noqa: E402

from components.image_sources import digits_records  # noqa: E402
from test_support.tiny_config import PLAIN_FLAGS, plain_trainer  # noqa: E402
from test_support.transform_runs import run_transform  # noqa: E402
from trainer_module.features import LABEL_KEY  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ["--depth=16", "--width_multiplier=2", "--train_epochs=15", "--log_every_steps=50",
         *PLAIN_FLAGS]
_EPOCH = re.compile(r"epoch (\d+) .*eval/accuracy (\S+)\s+eval/nll (\S+)")
_STEPS = re.compile(r"for (\d+) steps \((\d+) per epoch")
FLAGS = (harness.Flag("transfer_steps", "10,30", "comma-separated training step counts of the "
                      "5-class transfer runs, each run from scratch and warm-started (default "
                      "%(default)s)"),
         harness.keep("the work directory of transformed data, checkpoints and models"))


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def transformed_digits(work_dir):
  """{split: gzipped TFRecord path} of transformed train/eval digits, and the transform dir."""
  raw, split_of = [], {}
  for split in ("train", "eval"):
    for key, png, label in digits_records(split, 0.15, 0.15):
      raw.append({"image": png, "label": label, "key": key})
      split_of[key] = split
  _, transform_dir = run_transform(raw, plain_trainer().transform_options(), work_dir,
                                   ["--direct_running_mode=in_memory"])
  spec = tf.io.FixedLenFeature([], tf.string)
  writers = {s: tf.io.TFRecordWriter(os.path.join(work_dir, f"{s}.gz"), "GZIP")
             for s in ("train", "eval")}
  for record in tf.data.TFRecordDataset(tf.io.gfile.glob(os.path.join(work_dir,
                                                                      "transformed*.gz")), "GZIP"):
    key = tf.io.parse_single_example(record, {"key": spec})["key"].numpy().decode()
    example = tf.train.Example.FromString(record.numpy())
    del example.features.feature["key"]
    writers[split_of[key]].write(example.SerializeToString())
  for writer in writers.values():
    writer.close()
  return {s: os.path.join(work_dir, f"{s}.gz") for s in writers}, transform_dir


def five_class_subset(files, work_dir):
  """Digits 5-9 relabelled 0-4: a new label set the 10-class head does not know."""
  subset = {}
  for split, path in files.items():
    subset[split] = os.path.join(work_dir, f"five_{split}.gz")
    with tf.io.TFRecordWriter(subset[split], "GZIP") as writer:
      for record in tf.data.TFRecordDataset(path, "GZIP"):
        example = tf.train.Example.FromString(record.numpy())
        label = example.features.feature[LABEL_KEY].int64_list.value
        if label[0] >= 5:
          label[0] -= 5
          writer.write(example.SerializeToString())
  return subset


def train(name, files, transform_dir, output_dir, *flags):
  """Runs `python -m trainer_module`; returns (final eval metrics, steps, per-epoch evals)."""
  command = [sys.executable, "-m", "trainer_module", f"--train_files={files['train']}",
             f"--eval_files={files['eval']}", f"--transform_output={transform_dir}",
             f"--output_dir={output_dir}", *MODEL, *flags]
  print(f"[{name}] {' '.join(command[1:])}", flush=True)
  result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
  if result.returncode != 0:
    raise RuntimeError(f"{name} failed:\n{result.stderr[-3000:]}")
  done = result.stderr.split("Done: ")[-1].split()
  final = {k: float(v) for k, v in zip(done[::2], done[1::2])}
  steps = int(_STEPS.search(result.stderr).group(1))
  epochs = {int(e): (float(a), float(n)) for e, a, n in _EPOCH.findall(result.stderr)}
  return final, steps, epochs


def main():
  args = build_parser().parse_args()
  work = tempfile.mkdtemp(prefix="bench-warm-start-")
  try:
    files, transform_dir = transformed_digits(work)
    scratch, scratch_steps, scratch_epochs = train("scratch", files, transform_dir,
                                                   os.path.join(work, "scratch"))
    production = os.path.join(work, "scratch", "serving_model")
    warm, warm_steps, _ = train("warm", files, transform_dir, os.path.join(work, "warm"),
                                f"--warm_start={production}")
    same_epochs = scratch_epochs[max(1, 15 // 4)]
    five = five_class_subset(files, work)
    transfer = {}  # {(steps, run): final eval metrics}
    for steps in map(int, args.transfer_steps.split(",")):
      flags = ["--num_classes=5", f"--train_steps={steps}"]
      transfer[steps, "scratch"] = train(f"transfer-scratch-{steps}", five, transform_dir,
                                         os.path.join(work, f"t-scratch-{steps}"), *flags)[0]
      for ratio in (0.1, 1.0):
        transfer[steps, f"warm {ratio}"] = train(
            f"transfer-warm-{ratio}-{steps}", five, transform_dir,
            os.path.join(work, f"t-warm-{ratio}-{steps}"), *flags,
            f"--warm_start={production}", "--warm_start_exclude=head",
            f"--warm_start_lr_ratio={ratio}")[0]
  finally:
    if not args.keep:
      shutil.rmtree(work, ignore_errors=True)
  print("\nrun                          steps  eval accuracy  eval NLL")
  print(f"scratch (production model)   {scratch_steps:5d}  {scratch['eval/accuracy']:.4f}"
        f"         {scratch['eval/nll']:.4f}")
  print(f"scratch after {15 // 4} epochs         {warm_steps:5d}  {same_epochs[0]:.4f}"
        f"         {same_epochs[1]:.4f}")
  print(f"warm-started from production {warm_steps:5d}  {warm['eval/accuracy']:.4f}"
        f"         {warm['eval/nll']:.4f}")
  print(f"  steps ratio {warm_steps / scratch_steps:.3f}; reaches production accuracy: "
        f"{warm['eval/accuracy'] >= scratch['eval/accuracy']}, NLL: "
        f"{warm['eval/nll'] <= scratch['eval/nll']}")
  for (steps, run), metrics in transfer.items():
    print(f"5-class transfer, {run:<10} {steps:5d}  {metrics['eval/accuracy']:.4f}         "
          f"{metrics['eval/nll']:.4f}")
  print("(5-class warm 0.1: the default, restored variables at lr x0.1 and the new head at the "
        "full rate; warm 1.0: every variable at the full rate)")


if __name__ == "__main__":
  main()
