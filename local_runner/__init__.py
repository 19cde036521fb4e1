"""The local runner: TFX's LocalDagRunner on this machine, one run at a time (`python -m local_runner`)."""
