"""What several presets share."""
# AugMix in every pipeline preset (local and Kubeflow), in the configuration measured most
# robust within the time budget (docs/robustness.md, AugMix). The standalone trainer keeps the
# original script's default: off.
PIPELINE_AUGMIX = {"augmix": True, "aug_count": 2, "augmix_view_sets": 4}
