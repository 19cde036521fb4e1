"""`python -m pipeline [--flag=value ...]`: runs the pipeline locally with LocalDagRunner."""
import sys

from pipeline.local_runner import main

if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
