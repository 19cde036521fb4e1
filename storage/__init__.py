"""Object storage (s3://, gs://) for every process of the pipeline, whichever runner starts it."""
