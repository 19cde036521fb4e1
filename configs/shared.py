"""What several presets share."""
# AugMix in every pipeline preset (local and Kubeflow), in the configuration measured most
# robust within the time budget (docs/robustness.md, AugMix). The standalone trainer keeps the
# original script's default: off.
PIPELINE_AUGMIX = {"augmix": True, "aug_count": 2, "augmix_view_sets": 4}
# Calibration in every pipeline preset: the clean fit's T within the eval images' feature
# distance of the training data, the raw softmax beyond, chosen by the validation-corruption
# rule (docs/robustness.md): on the default model it improves clean calibration and keeps
# calibration under shift no worse than raw, which one T cannot. A hyper-deep ensemble
# (hyper_trials > 1) measures the support on its members' features.
PIPELINE_CALIBRATION = {"temperature_fit": "in_support"}
