"""What the local runner shows afterwards: a run read back from MLMD, and its summary read from
the run's report artifact."""
