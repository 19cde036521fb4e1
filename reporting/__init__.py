"""What a run shows afterwards: the console summary, the run report and its charts, a run read back from MLMD."""
