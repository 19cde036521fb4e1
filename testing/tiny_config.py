"""The flags of the tiny pipeline runs in CI (tests/pipeline_e2e_test.py, the KFP harness).

A WRN-10-1 for a few epochs: enough to learn digits, fast enough for CI; gate bounds to match
(with AugMix it is very under-confident, raw eval ECE ~0.45, and the default temperature fit
does not sharpen it at the cost of calibration under shift), 5 test images per corruption x
severity (15 x 5 slices: 375 corrupted images), and 10 eval images per validation corruption x
severity for the temperature (4 x 5 slices: 200 images).
"""
SMALL_MODEL = ["--depth=10", "--width_multiplier=1", "--train_epochs=6",
               "--lr_decay_epochs=120,160", "--min_eval_accuracy=0.5", "--max_eval_ece=0.6",
               "--max_eval_nll=1.5", "--min_corrupted_accuracy=0.2", "--max_corrupted_nll=10",
               "--max_corrupted_ece=0.6", "--max_corrupted_mean_ece=0.7",
               "--examples_per_corruption=5",
               "--validation_corruption_examples=10"]
