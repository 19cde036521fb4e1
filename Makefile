# `make run` and `make test` set up .venv from requirements.lock when needed, then do their job.
PYTHON ?= python3.11
VENV := .venv
VENV_PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-lock
# Arguments of the command a target runs: only `make run ARGS="..."` sets them; a variable ARGS
# in the environment (a CI job's, a shell's) is not meant for us and is ignored.
ifneq ($(origin ARGS),command line)
override ARGS :=
endif

export PYTHONDONTWRITEBYTECODE := 1
# The suite on pytest-xdist's workers, one per core: a file's tests on one worker, the longest
# files first (conftest.py).
PYTEST_PARALLEL := $(VENV_PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder

.PHONY: run test check mutation setup system-packages container-packages test-packages lock clean bench-augmix bench-trainer bench-evaluator \
	bench-calibration bench-ensemble bench-corruptions bench-beam bench-startup \
	kubeflow-compile kubeflow-image kubeflow-image-local kubeflow-local kubeflow-local-kfp \
	kubeflow-local-docker

setup: $(STAMP)

# Debian packages the robustness set needs: ImageMagick (its MagickWand library, which Wand loads
# for tfds' motion blur and snow) and the libraries opencv-python loads. Needs root; skipped
# when installed.
SYSTEM_PACKAGES := imagemagick libgl1 libglib2.0-0
# What builds and runs the pipeline's image without Docker (test_support/container_image.py):
# podman with the runc runtime, and debootstrap for the local base image.
CONTAINER_PACKAGES := podman runc debootstrap
# What the tests add: the browser the run report's HTML page is opened in (chromium, driven by
# selenium through chromium-driver), and the container tools.
TEST_PACKAGES := chromium chromium-driver $(CONTAINER_PACKAGES)
define install_debian_packages
	@dpkg -s $(1) >/dev/null 2>&1 || { \
		if [ "$$(id -u)" != 0 ]; then echo ">> needs: sudo apt-get install $(1)"; exit 1; fi; \
		echo ">> installing Debian packages: $(1)"; apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; }
endef
system-packages:
	$(call install_debian_packages,$(SYSTEM_PACKAGES))
container-packages:
	$(call install_debian_packages,$(CONTAINER_PACKAGES))
test-packages:
	$(call install_debian_packages,$(SYSTEM_PACKAGES) $(TEST_PACKAGES))

# The stamp records the lock's hash: an unchanged lock skips the install.
$(STAMP): requirements.lock pyproject.toml
	@if [ -f $(STAMP) ] && [ "$$(cat $(STAMP))" = "$$(cat requirements.lock pyproject.toml | sha256sum)" ]; then \
		touch $(STAMP); exit 0; fi; \
	set -e; \
	echo ">> installing requirements.lock into $(VENV) (a few minutes, once per lock change;" \
	     "pip's output: $(VENV)/install.log)"; \
	[ -x $(VENV_PY) ] || $(PYTHON) -m venv $(VENV); \
	if ! { $(VENV_PY) -m pip install --no-deps --ignore-requires-python -r requirements.lock \
	       && $(VENV_PY) -m pip install --no-deps --no-build-isolation -e . ; } \
	     > $(VENV)/install.log 2>&1; then \
		tail -n 40 $(VENV)/install.log; echo ">> install failed; see $(VENV)/install.log"; exit 1; \
	fi; \
	cat requirements.lock pyproject.toml | sha256sum > $(STAMP)

run: system-packages $(STAMP)
	$(VENV_PY) -m local_runner $(ARGS)

# The fast tier, for the edit loop: unit and component tests, no pipeline run, no image.
check: test-packages $(STAMP)
	$(PYTEST_PARALLEL) -m "not e2e and not container" $(ARGS)

# Everything, as CI runs it: the suite, then the container image's build and runs, timed apart
# (docs/development.md, "Tiers"). A selection (ARGS) without container tests skips the second.
test: test-packages $(STAMP)
	$(PYTEST_PARALLEL) --durations=15 -m "not container" $(ARGS)
	@status=0; $(VENV_PY) -m pytest --durations=5 -m container $(ARGS) || status=$$?; \
		[ $$status = 0 ] || [ $$status = 5 ]

# Mutation testing (docs/development.md, "Mutation testing"): mutmut ([tool.mutmut] in
# pyproject.toml) plants small changes in the critical modules, in a copy of the tree (mutants/),
# and runs the fast tier's tests of each against every one, a process per core; then the kill
# rate, the harmless mutants of test_support/equivalent_mutants.txt left out. Results are kept
# in mutants/: a rerun runs only the mutants without a result (delete mutants/ for a fresh
# run). ARGS: mutant names or globs, run again (e.g. ARGS="components.pusher.*").
MUTATION_WORKERS ?= $(shell nproc)
mutation: $(STAMP)
	$(VENV)/bin/mutmut run --max-children $(MUTATION_WORKERS) $(ARGS)
	$(VENV_PY) -m test_support.mutation_report --fail-under 90

# Regenerates requirements.lock from requirements.in. The resolver is told Python 3.10 because
# tfx and ml-pipelines-sdk 1.16 declare Requires-Python <3.11 (metadata only; they run on 3.11);
# requirements.overrides restores what the packages declare for 3.11 (protobuf 4.25).
lock:
	@[ -x $(VENV)-tools/bin/uv ] || ($(PYTHON) -m venv $(VENV)-tools && $(VENV)-tools/bin/pip install --quiet uv==0.13.8)
	$(VENV)-tools/bin/uv pip compile requirements.in --override requirements.overrides --python-version 3.10 \
		--python-platform x86_64-manylinux_2_28 -o requirements.lock

clean:
	rm -rf outputs

bench-augmix: $(STAMP)
	$(VENV_PY) bench/augmix.py $(ARGS)

bench-trainer: $(STAMP)
	$(VENV_PY) bench/trainer.py $(ARGS)

# Needs a `make run` output (the pushed model and the ExampleGen splits).
bench-evaluator: $(STAMP)
	$(VENV_PY) bench/evaluator.py $(ARGS)

# Each way of choosing the temperature, measured on a finished run (default: outputs/).
bench-calibration: $(STAMP)
	$(VENV_PY) bench/calibration.py $(ARGS)

# An ensemble run (--ensemble_size=K --hyper_trials=N) against its best single member.
bench-ensemble: $(STAMP)
	$(VENV_PY) bench/ensemble.py $(ARGS)

bench-corruptions: system-packages $(STAMP)
	$(VENV_PY) bench/corruptions.py $(ARGS)

bench-startup: $(STAMP)
	$(VENV_PY) bench/startup.py $(ARGS)

bench-beam: $(STAMP)
	$(VENV_PY) bench/beam_modes.py $(ARGS)

# Kubeflow Pipelines (docs/kubeflow.md):
#   make kubeflow-image IMAGE=gcr.io/PROJECT/wrn-pipeline:TAG
#   make kubeflow-compile ARGS="--image=gcr.io/PROJECT/wrn-pipeline:TAG --output_dir=gs://BUCKET/wrn"
kubeflow-compile: $(STAMP)
	$(VENV_PY) -m kubeflow compile $(ARGS)

# The compiled kfp spec of the tiny e2e config, executed as an open-source KFP backend would
# (test_support/kfp_harness.py) on a local S3 server; prints where the pushed model is.
kubeflow-local: system-packages $(STAMP)
	$(VENV_PY) -m test_support.kfp_harness $(ARGS)

# The same, run by the KFP SDK's own local orchestrator (kfp.local) through
# `python -m kubeflow local-run --runner=subprocess`; artifacts under outputs/kubeflow-local-kfp.
kubeflow-local-kfp: system-packages $(STAMP)
	$(VENV_PY) -m test_support.kfp_harness --orchestrator=kfp.local $(ARGS)

kubeflow-image:
	@[ -n "$(IMAGE)" ] || { echo "IMAGE is required: make kubeflow-image IMAGE=gcr.io/PROJECT/wrn-pipeline:TAG"; exit 2; }
	docker build -t $(IMAGE) . && docker push $(IMAGE)

# The same Dockerfile built here without Docker: podman, on a Debian base made with debootstrap
# (TFX's image cannot be pulled here); named localhost/wrn-pipeline:<hash of its inputs>, so an
# unchanged build is found, not rebuilt (test_support/container_image.py).
kubeflow-image-local: container-packages $(STAMP)
	$(VENV_PY) -m test_support.container_image

# That image built (or found), then the compiled tiny pipeline run in its containers twice by
# `python -m kubeflow local-run --runner=docker` on podman's Docker API (test_support/container_run.py).
kubeflow-local-docker: container-packages $(STAMP)
	$(VENV_PY) -m test_support.container_run $(ARGS)
