# `make run` and `make test` set up .venv from requirements.lock when needed, then do their job.
PYTHON ?= python3.11
VENV := .venv
VENV_PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-lock
ARGS ?=

# TFX 1.16 / TFT / TFMA need Keras 2 (tf_keras); set before TensorFlow loads, in every process.
export TF_USE_LEGACY_KERAS := 1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: run test setup lock bench clean

setup: $(STAMP)

# The stamp records the lock's hash: an unchanged lock skips the install.
$(STAMP): requirements.lock pyproject.toml
	@if [ -f $(STAMP) ] && [ "$$(cat $(STAMP))" = "$$(cat requirements.lock pyproject.toml | sha256sum)" ]; then \
		touch $(STAMP); exit 0; fi; \
	set -e; \
	echo ">> creating $(VENV) and installing requirements.lock (a few minutes, once)"; \
	[ -x $(VENV_PY) ] || $(PYTHON) -m venv $(VENV); \
	$(VENV_PY) -m pip install --quiet --no-deps --ignore-requires-python -r requirements.lock; \
	$(VENV_PY) -m pip install --quiet --no-deps --no-build-isolation -e .; \
	cat requirements.lock pyproject.toml | sha256sum > $(STAMP)

run: $(STAMP)
	$(VENV_PY) -m pipeline $(ARGS)

test: $(STAMP)
	$(VENV_PY) -m pytest $(ARGS)

# Regenerates requirements.lock from requirements.in. The resolver is told Python 3.10 because
# tfx and ml-pipelines-sdk 1.16 declare Requires-Python <3.11 (metadata only; they run on 3.11).
lock:
	@[ -x $(VENV)-tools/bin/uv ] || ($(PYTHON) -m venv $(VENV)-tools && $(VENV)-tools/bin/pip install --quiet uv==0.13.8)
	$(VENV)-tools/bin/uv pip compile requirements.in --python-version 3.10 \
		--python-platform x86_64-manylinux_2_28 -o requirements.lock

clean:
	rm -rf outputs
