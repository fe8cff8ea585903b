# The two commands: `make image` and `make test` (run as root on Debian 12).
# Both run `make setup` first. Every step prints its wall clock and CPU time
# when it ends (scripts/step); pytest prints the slowest tests and Ansible its
# slowest tasks (profile_tasks).
SHELL := /bin/bash
# The distribution's Python builds the virtualenv where it has one: Debian builds
# it with profile-guided optimisation and links libpython statically, where a
# Python compiled by hand or by pyenv (first on PATH on some machines) usually
# has neither, and Ansible's controller is a quarter of make test's CPU.
# PYTHON= picks another.
PYTHON ?= $(or $(wildcard /usr/bin/python3),python3)
VENV ?= .venv
BIN := $(VENV)/bin
# Python keeps what it compiles (the virtualenv is installed --no-compile and
# compiled on first use): where the environment sets PYTHONDONTWRITEBYTECODE,
# every ansible-playbook run and molecule command would compile its imports again.
unexport PYTHONDONTWRITEBYTECODE
# Tools from the virtualenv first; `setup` itself runs with the system python3.
WITH_VENV := env PATH=$(abspath $(BIN)):$(PATH)
# Prefix of every step: its wall clock and CPU time, printed when it ends, and
# in make test its log and exit status for the summary at the end.
TIMED = $(CURDIR)/scripts/step $@
# `make image`: the flavour and profile to build; BASE_IMAGE= replaces the
# flavour's base image (flavors.yml).
FLAVOR ?= efa
PROFILE ?= aws
# Base image of the molecule scenarios (any image with python3 and apt).
EFA_IMAGE_BASE ?= efa-image/base:debian13
export EFA_IMAGE_BASE
# Debian 12 too: every source build, the SageMaker scenarios and images (its
# Python 3.11 is the one the lock's PyTorch is for) and the refusal scenarios.
SECOND_BASE := efa-image/base:debian12
# The CI mirror: what the scenarios build from, filled from Debian's source pool
# and PyPI with the pins of the Debian-sources overlay (the portable profile's).
MIRROR ?= $(CURDIR)/.cache/ci-mirror
CI_LOCK_OVERLAY := $(CURDIR)/playbooks/lock-overlays/debian-sources.yml
CI_MIRROR_ARTIFACTS := libfabric openmpi openmpi4 metis nccl_wheel rmm_wheel rapids_logger_wheel cmake_wheel pytorch sagemaker_training \
    pytorch_cu13 nccl_wheel_cu13 cuda13_toolkit

.PHONY: setup image bench test test-steps lint ruff ruff-format yamllint ansible-lint unit \
    packer-check inputs ci-mirror base-images molecule image-tests docs clean \
    test-engine test-engine-stop

setup:
	@$(TIMED) env PYTHONPATH=src $(PYTHON) -m efa_image setup

# MIRROR=DIR|URL (or EFA_IMAGE_MIRROR) builds from a mirror only.
image: setup
	@$(TIMED) $(WITH_VENV) efa-image build --flavor $(FLAVOR) --profile $(PROFILE) \
	    $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) \
	    $(if $(filter command line,$(origin MIRROR)),--mirror $(MIRROR))

# FLAVOR cold, unchanged and one-bump, the distro profile cold, AWS's documented
# recipe (bench/aws-doc-recipe) the same ways, and unchanged and one-bump on a
# fresh machine (a copy of the tree, empty caches, none of the bench's images)
# from the loopback registry the cold run pushed to, with the ratios and targets
# in build/bench/FLAVOR-PROFILE.json and docs/benchmark-results.md (not part of
# `make test`; 22 min here with the fresh-machine runs, which
# `scripts/bench FLAVOR PROFILE --skip fresh` leaves out). Plain `make bench` is
# efa-reduced/portable: what this machine can build (FLAVOR= and PROFILE= given
# on the command line or in the environment win).
bench: FLAVOR := $(if $(filter file,$(origin FLAVOR)),efa-reduced,$(FLAVOR))
bench: PROFILE := $(if $(filter file,$(origin PROFILE)),portable,$(PROFILE))
bench: setup
	@$(TIMED) $(WITH_VENV) scripts/bench $(FLAVOR) $(PROFILE) \
	    $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) \
	    $(if $(filter command line,$(origin MIRROR)),--mirror $(MIRROR))

# `make test`: every step below is a make target, and make runs them two at a
# time, one per core, in the order of TEST_STEPS as their prerequisites allow;
# each step's output comes as one block when it ends (--output-sync), so the
# two cores' lines never mix. A step alone streams its output: `make
# molecule@openmpi/default`, `make image-tests@build`. A failed step does not
# stop the others (--keep-going): make test ends with the steps' times and the
# failed steps' first error lines (tools/stepsummary.py).
#
# The steps that use Docker talk to make test's own engine, whose image store
# make test empties first, so every run builds its bases and images as a new
# machine's first run does; their artifact and build cache is emptied with it.
# The machine's engine, its images and ~/.cache/efa-image are left alone. A step
# run alone starts the engine on the store the last run left (test-engine).
TEST_JOBS ?= 2
TEST_STATE := $(CURDIR)/build/test-engine
TEST_LOGS := $(CURDIR)/build/test-logs
TEST_ENGINE := $(BIN)/python -m efa_image.setup.testengine --state $(TEST_STATE)
test: setup
	@rm -rf $(TEST_LOGS) $(TEST_STATE)/cache && $(TEST_ENGINE) start --fresh
	@env STEP_LOGS=$(TEST_LOGS) $(TIMED) $(MAKE) --no-print-directory --keep-going --jobs=$(TEST_JOBS) \
	    --output-sync=target TEST_ORDER=1 test-steps; status=$$?; \
	$(TEST_ENGINE) stop; \
	$(BIN)/python tools/stepsummary.py $(TEST_LOGS) $(TEST_STEPS) ci-mirror base-images && exit $$status

test-engine:
	@$(TEST_ENGINE) start

test-engine-stop:
	@$(TEST_ENGINE) stop

# Every scenario: roles/ROLE/molecule/SCENARIO as ROLE/SCENARIO, and the
# flavours' scenarios in molecule/ by name.
SCENARIOS := $(sort $(patsubst roles/%/molecule.yml,%,$(subst /molecule/,/,$(wildcard roles/*/molecule/*/molecule.yml)))) \
    $(sort $(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))
SCENARIO_STEPS := $(addprefix molecule@,$(SCENARIOS))
# Run by `make molecule` but not by make test: the efa-reduced flavour's scenario
# converges the same roles with the same profile on the same base, runs their
# test files and re-pins their components (molecule/README.md).
COVERED_BY_FLAVOUR_SCENARIOS := molecule@efa/default molecule@openmpi/default
# The image tests in groups that run as one pytest session each; the groups'
# tests share built images, and the base they build on (IMAGE_TEST_BASE).
IMAGE_TEST_GROUPS := build push sagemaker torchrun hosts distro cuda13
IMAGE_TEST_STEPS := $(addprefix image-tests@,$(IMAGE_TEST_GROUPS))
.PHONY: $(SCENARIO_STEPS) $(IMAGE_TEST_STEPS)
IMAGE_TESTS_build := tests/image/test_image_build.py
IMAGE_TESTS_push := tests/image/test_registry_push.py tests/image/test_registry_builds.py
IMAGE_TESTS_sagemaker := tests/image/test_sagemaker_image.py
IMAGE_TESTS_torchrun := tests/image/test_torchrun_image.py
# On the CUDA 13 base (profile portable-cuda13): nothing it compiles is shared
# with the Debian 12 builds (another base, libfabric with CUDA).
IMAGE_TESTS_cuda13 := tests/image/test_cuda13.py
IMAGE_TESTS_hosts := tests/image/test_hosts.py
IMAGE_TESTS_distro := tests/image/test_distro_profile.py tests/image/test_packer_direct.py \
    tests/image/test_interrupted_build.py
IMAGE_TEST_BASE_build := $(SECOND_BASE)
IMAGE_TEST_BASE_push := $(SECOND_BASE)
IMAGE_TEST_BASE_sagemaker := $(SECOND_BASE)
IMAGE_TEST_BASE_torchrun := $(SECOND_BASE)

# libfabric and Open MPI are compiled once per run: image-tests@build's first
# build, the efa-reduced image on Debian 12, puts them into the build cache, and
# the steps that build them on Debian 12 come after it and take them from there.
# While that build runs, the other core takes EARLY_STEPS, about as long as the
# build; every other step waits for it too. Make queues the steps that can start
# in the order of TEST_STEPS, longest first, when the build ends. (A step that
# waited for another late step would go to the end of that queue: the SageMaker
# images compile the toolkit's sdists themselves, beside sagemaker_training,
# rather than wait for it to cache them.)
EARLY_STEPS := ruff ruff-format yamllint unit ansible-lint packer-check image-tests@distro \
    molecule@artifact/default molecule@common/default
LATE_STEPS := $(filter-out image-tests@build $(EARLY_STEPS) $(COVERED_BY_FLAVOUR_SCENARIOS),\
    $(IMAGE_TEST_STEPS) $(SCENARIO_STEPS))
# The order holds in make test only (TEST_ORDER=1): a step run alone
# (`make molecule@efa-reduced`) starts at once and compiles what it needs.
ifeq ($(TEST_ORDER),1)
$(LATE_STEPS): image-tests@build
endif
TEST_STEPS := image-tests@build $(EARLY_STEPS) \
    image-tests@sagemaker image-tests@torchrun image-tests@cuda13 \
    molecule@sagemaker_training/default image-tests@hosts $(addprefix molecule@,sagemaker-reduced sagemaker-torchrun-reduced \
        efa-reduced pytorch/default metis/default rmm/default nccl/default mpi_ssh/default) \
    $(LATE_STEPS)
test-steps: $(TEST_STEPS)

DOCKER_STEPS := inputs ci-mirror base-images molecule image-tests $(SCENARIO_STEPS) $(IMAGE_TEST_STEPS)
$(DOCKER_STEPS): export DOCKER_HOST := unix:///run/efa-image/test-engine/docker.sock
$(DOCKER_STEPS): export EFA_IMAGE_CACHE := $(TEST_STATE)/cache
base-images $(SCENARIO_STEPS) $(IMAGE_TEST_STEPS): | test-engine

lint: ruff ruff-format yamllint ansible-lint

ruff:
	@$(TIMED) $(BIN)/ruff check src tests roles plugins tools molecule

ruff-format:
	@$(TIMED) $(BIN)/ruff format --check src tests roles plugins tools molecule

yamllint:
	@$(TIMED) $(BIN)/yamllint --strict .

ansible-lint:
	@$(TIMED) $(WITH_VENV) ansible-lint --strict

# Two workers; a file's tests stay on one worker, so a module's fixture (an
# Ansible run on localhost) runs once. In a shuffled order (pytest-randomly), so
# a test that needs another to run first fails; the header names the seed, and
# `pytest -p randomly --randomly-seed=N` runs that order again.
unit:
	@$(TIMED) $(BIN)/pytest -p randomly -n 2 --dist loadfile --durations=10

packer-check:
	@$(TIMED) $(WITH_VENV) scripts/packer-check

inputs: ci-mirror base-images

# Then the profile portable-cuda13's NCCL (its overlay's nccl_wheel) beside it.
ci-mirror:
	@$(TIMED) env EFA_IMAGE_LOCK_OVERLAY=$(CI_LOCK_OVERLAY) \
	    $(BIN)/efa-image mirror create $(MIRROR) $(addprefix --name ,$(CI_MIRROR_ARTIFACTS))
	@$(TIMED) env EFA_IMAGE_LOCK_OVERLAY=$(CI_LOCK_OVERLAY):$(CURDIR)/playbooks/lock-overlays/cuda13.yml \
	    $(BIN)/efa-image mirror create $(MIRROR) --name nccl_wheel

base-images:
	@$(TIMED) $(BIN)/efa-image base --image $(EFA_IMAGE_BASE) --image $(SECOND_BASE)

# `cd roles/ROLE && molecule test -s SCENARIO`, or `molecule test -s FLAVOR` at the
# top for the flavours', from the CI mirror. A scenario that needs artifacts no
# reachable source carries names them in requires-artifacts: it runs when the
# mirror holds them and is skipped, saying so, when it does not.
MOLECULE_ENV := $(WITH_VENV) EFA_IMAGE_MIRROR=$(MIRROR) EFA_IMAGE_LOCK_OVERLAY=$(CI_LOCK_OVERLAY)
scenario_dir = $(if $(findstring /,$(1)),roles/$(subst /,/molecule/,$(1)),molecule/$(1))
$(SCENARIO_STEPS): molecule@%: inputs
	@dir=$(call scenario_dir,$*); names=$$(grep -hv '^#' $$dir/requires-artifacts 2>/dev/null); \
	if [[ -n $$names ]] && ! $(MOLECULE_ENV) efa-image fetch --check $$(printf -- '--name %s ' $$names) >/dev/null 2>&1; then \
	    $(TIMED) echo "skipped: the mirror ($(MIRROR)) lacks" $$names", which no reachable source carries"; \
	else \
	    cd $(if $(findstring /,$*),roles/$(firstword $(subst /, ,$*)),.) && \
	    $(TIMED) $(MOLECULE_ENV) molecule test --scenario-name $(lastword $(subst /, ,$*)); \
	fi

molecule: $(SCENARIO_STEPS)

# Real `efa-image build` runs from the CI mirror (tests/image): the efa-reduced
# flavour (efa without aws-ofi-nccl and nccl-tests, which the CI mirror cannot
# hold), profile portable. pytest shows what each test printed (job output,
# timings) and the slowest tests.
$(IMAGE_TEST_STEPS): image-tests@%: inputs
	@$(TIMED) env EFA_IMAGE_IMAGE_TESTS=1 EFA_IMAGE_MIRROR=$(MIRROR) \
	    EFA_IMAGE_BASE=$(or $(IMAGE_TEST_BASE_$*),$(EFA_IMAGE_BASE)) \
	    EFA_IMAGE_TEST_FLAVOR=efa-reduced EFA_IMAGE_TEST_PROFILE=portable \
	    $(WITH_VENV) pytest -v -rP --durations=20 $(IMAGE_TESTS_$*)

image-tests: $(IMAGE_TEST_STEPS)

# Regenerates the variable tables in roles/*/README.md from meta/argument_specs.yml.
docs:
	env PYTHONPATH=tools $(BIN)/python -m roledocs

# Removes make test's engine with its store, and the base images of `make image`;
# the virtualenv stays (rm -rf .venv).
clean:
	-$(TEST_ENGINE) remove
	-$(BIN)/efa-image base --clean
	rm -rf .cache .pytest_cache .ruff_cache build/test-logs
