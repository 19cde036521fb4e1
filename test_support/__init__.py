"""What tests, benchmarks and `make kubeflow-local` share: independent reference computations,
local stand-ins for servers (S3, KFP), small data and runs. Never imported by the pipeline."""
