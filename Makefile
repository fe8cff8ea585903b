# The two commands: `make image` and `make test` (run as root on Debian 12).
# Both run `make setup` first; every stage prints its duration.
SHELL := /bin/bash
# The distribution's Python builds the virtualenv where it has one: Debian builds
# it with profile-guided optimisation and links libpython statically, where a
# Python compiled by hand or by pyenv (first on PATH on some machines, as here)
# usually has neither. Ansible's controller took 14 % less CPU on Debian 12's
# 3.11.2 than on pyenv's 3.11.7 here (a 150-task playbook, three pairs), and
# the controller is a quarter of make test's CPU. PYTHON= picks another.
PYTHON ?= $(or $(wildcard /usr/bin/python3),python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAGE := scripts/stage
# One stage log per top-level make goal, so `make image` and `make test` can run side by side.
export EFA_IMAGE_STAGE_LOG ?= $(CURDIR)/.cache/stages-$(or $(firstword $(MAKECMDGOALS)),default).tsv
# Python keeps what it compiles (the virtualenv is installed --no-compile and
# compiled on first use). Where the environment sets PYTHONDONTWRITEBYTECODE, as
# on this machine, every ansible-playbook run, each of its task workers and
# every molecule command would compile their imports from source again:
# an unchanged converge of the openmpi scenario took 40 s instead of 33 s here,
# its controller CPU 23 s instead of 17 s.
unexport PYTHONDONTWRITEBYTECODE
# Tools from the virtualenv first; `setup` itself runs with the system python3.
WITH_VENV := env PATH=$(abspath $(BIN)):$(PATH)
# `make image`: the flavour and profile to build; BASE_IMAGE= replaces the
# flavour's base image (flavors.yml).
FLAVOR ?= efa
PROFILE ?= aws
# Base image of the molecule scenarios (any image with python3 and apt).
EFA_IMAGE_BASE ?= efa-image/base:debian13
export EFA_IMAGE_BASE
# The CI mirror: what the scenarios build from, filled from Debian's source pool
# and PyPI with the pins of the Debian-sources overlay (the portable profile's).
MIRROR ?= $(CURDIR)/.cache/ci-mirror
CI_LOCK_OVERLAY := $(CURDIR)/playbooks/lock-overlays/debian-sources.yml
CI_MIRROR_ARTIFACTS := libfabric openmpi openmpi4 metis nccl_wheel rmm_wheel rapids_logger_wheel cmake_wheel pytorch sagemaker_training

.PHONY: setup image bench test idle-checks checks test-inputs lint quick-lint ansible-lint unit unit-plays packer-check ci-mirror base-image \
    second-base-image base-images molecule lane-builds lane-checks image-tests run-image-tests docs clean

setup:
	@$(STAGE) --reset
	@$(STAGE) setup env PYTHONPATH=src $(PYTHON) -m efa_image setup

# MIRROR=DIR|URL (or EFA_IMAGE_MIRROR) builds from a mirror only.
image: setup
	@$(STAGE) image $(WITH_VENV) efa-image build --flavor $(FLAVOR) --profile $(PROFILE) \
	    $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) \
	    $(if $(filter command line,$(origin MIRROR)),--mirror $(MIRROR))
	@$(STAGE) --summary

# FLAVOR cold, unchanged and one-bump, the distro profile cold, and AWS's documented
# recipe (bench/aws-doc-recipe) the same ways, with the ratios and targets in
# build/bench/FLAVOR-PROFILE.json and a table (not part of `make test`; about 40 min here).
# Plain `make bench` is the issue's comparison, efa-reduced/portable: what this
# machine can build (FLAVOR= and PROFILE= given on the command line or in the environment win).
bench: FLAVOR := $(if $(filter file,$(origin FLAVOR)),efa-reduced,$(FLAVOR))
bench: PROFILE := $(if $(filter file,$(origin PROFILE)),portable,$(PROFILE))
bench: setup
	@$(STAGE) bench $(WITH_VENV) scripts/bench $(FLAVOR) $(PROFILE) \
	    $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) \
	    $(if $(filter command line,$(origin MIRROR)),--mirror $(MIRROR))
	@$(STAGE) --summary

# `make test` runs its long part in two lanes side by side, one per core. Every
# source build is on Debian 12 (its Python 3.11 is the one the lock's PyTorch
# is for, so the SageMaker scenarios and images are there too), and each
# component is compiled once per run: the first lane's first build, the
# efa-reduced image, compiles libfabric and Open MPI, and every later build
# takes them from the build cache. That lane goes on with that image's tests
# and push, the reduced SageMaker image that extends it (the same inputs, so the
# efa-reduced image is reused by fingerprint). The second runs what needs no
# compiled component (artifact, common, the Debian 13 distro profile, Packer run
# by hand, interrupted builds, metis, pytorch, the efa role's package refusal),
# then waits until the first lane has stored Open MPI in the build cache
# (scripts/wait-for-build-cache) and runs sagemaker_training, which takes it
# from there: it compiles the sdists (mpi4py against that Open MPI) before the
# SageMaker image gets to them, and the image takes their wheels from the cache.
# Then both lanes take the remaining scenarios from one shared list (openmpi and
# efa/default take libfabric and Open MPI from the cache; nccl, rmm and mpi_ssh
# need none), so they end within about one scenario of each other whichever
# lane the machine slowed more. Every scenario and image
# test is in one lane or the shared list (tests/test_roles.py checks it); `make
# molecule` and `make image-tests` run all of theirs one after the other. Output
# is not synchronised: both lanes' lines interleave as they come, so long steps
# show progress.
BUILD_IMAGE_TESTS := tests/image/test_image_build.py tests/image/test_registry_push.py tests/image/test_sagemaker_image.py
CHECK_SCENARIOS := artifact common
CHECK_IMAGE_TESTS := tests/image/test_distro_profile.py tests/image/test_packer_direct.py tests/image/test_interrupted_build.py
CHECK_LATE_SCENARIOS := metis pytorch smdistributed efa/package_refused
CHECK_AFTER_OPENMPI_SCENARIOS := sagemaker_training
# Existing hosts over SSH (host mode): takes libfabric and Open MPI from the build cache too.
CHECK_AFTER_OPENMPI_IMAGE_TESTS := tests/image/test_hosts.py
# Both lanes end with this list (scripts/molecule-all --shared), longest first:
# each scenario runs in the lane that gets to it first.
SHARED_SCENARIOS := openmpi nccl/default rmm mpi_ssh efa/default aws_ofi_nccl nccl/source

# The checks that need no particular moment run beside everything else at idle
# priority (SCHED_IDLE, `chrt --idle 0`): ansible-lint, the unit tests that run
# Ansible plays on localhost (tests/localplay.py; marked `plays` by
# tests/conftest.py) and Packer's checks. An idle-priority process gets a core
# only when no other stage wants one, and both cores are busy most of the run but
# not all of it (about 6 % idle in the lanes, more while the CI mirror downloads).
# Their CPU (ansible-lint 95 s, the plays about 57 s, Packer 12 s) fills the
# moments when both cores would otherwise wait, and the lanes start at about 70 s
# instead of 124 s. Measured, the whole run gained only 5 to 20 s: the stages
# beside the idle checks (artifact, common) took about as much longer, as work
# on one of this VM's two vCPUs slows the other's.
# (Checks beside the lanes at nice 10 took a tenth of the CPU all along and made
# the run slower; an idle-priority process takes almost nothing while others run.)
# The plays run under Ansible's own linear strategy there: Mitogen's connection
# times out when its interpreter does not answer within seconds, which a starved
# one may not. The unit tests that measure time (timeouts, waits) stay in
# `checks`, at normal priority. A failure among the idle checks fails `make
# test` at the end, after the lanes, with its lines in the summary; `-k` runs
# the other idle checks anyway. The summary comes last even when a stage failed,
# ending with that stage's error lines: the lanes' output interleaves, and CI
# shows only its end.
test: setup
	@chrt --idle 0 $(MAKE) --no-print-directory -k idle-checks & idle=$$!; \
	    $(MAKE) --no-print-directory -j2 checks test-inputs \
	    && $(MAKE) --no-print-directory -j2 lane-builds lane-checks; \
	    rc=$$?; wait $$idle || rc=$$((rc ? rc : 1)); $(STAGE) --summary; exit $$rc

# In this order, one at a time (make test runs them at idle priority).
idle-checks: ansible-lint unit-plays packer-check

# Side by side before the lanes: the quick linters and the unit tests that run no
# plays (about 20 s) take the CPU; the CI mirror and the two base images, all
# three side by side, mostly the network and the disk. The lanes wait for the
# inputs, so those no longer wait for each other (the mirror came first while
# the unit tests' plays ran here too).
checks:
	@$(MAKE) --no-print-directory quick-lint
	@$(MAKE) --no-print-directory unit UNIT_SELECT='-m "not plays"'

test-inputs:
	@$(MAKE) --no-print-directory -j3 ci-mirror base-image second-base-image

lane-builds:
	@$(MAKE) --no-print-directory run-image-tests IMAGE_STAGE=image-tests \
	    IMAGE_BASE=$(SECOND_BASE) IMAGE_TESTS="$(BUILD_IMAGE_TESTS)"
	@$(MOLECULE_ALL) --shared $(SHARED_SCENARIOS)

lane-checks:
	@$(MOLECULE_ALL) $(CHECK_SCENARIOS)
	@$(MAKE) --no-print-directory run-image-tests IMAGE_STAGE=image-tests:distro IMAGE_TESTS="$(CHECK_IMAGE_TESTS)"
	@$(MOLECULE_ALL) $(CHECK_LATE_SCENARIOS)
	@$(STAGE) wait:build-cache $(WITH_VENV) scripts/wait-for-build-cache openmpi image-tests
	@$(MOLECULE_ALL) $(CHECK_AFTER_OPENMPI_SCENARIOS)
	@$(MAKE) --no-print-directory run-image-tests IMAGE_STAGE=image-tests:hosts IMAGE_TESTS="$(CHECK_AFTER_OPENMPI_IMAGE_TESTS)"
	@$(MOLECULE_ALL) --shared $(SHARED_SCENARIOS)

lint: quick-lint
	@$(MAKE) --no-print-directory ansible-lint

quick-lint:
	@$(STAGE) ruff $(BIN)/ruff check src tests roles plugins tools
	@$(STAGE) ruff-format $(BIN)/ruff format --check src tests roles plugins tools
	@$(STAGE) yamllint $(BIN)/yamllint --strict .

ansible-lint:
	@$(STAGE) ansible-lint $(WITH_VENV) ansible-lint --strict

# Two workers, one per core; a file's tests stay on one worker, so a module's
# fixture (an Ansible run on localhost) runs once. UNIT_SELECT: pytest options
# that pick some of them (make test's `-m "not plays"`).
unit:
	@$(STAGE) --pytest pytest $(BIN)/pytest -n 2 --dist loadfile $(UNIT_SELECT)

# The unit tests that run Ansible plays on localhost, under Ansible's linear
# strategy (make test runs them at idle priority: see there).
unit-plays:
	@$(STAGE) --pytest pytest:plays env EFA_IMAGE_ANSIBLE_STRATEGY=linear \
	    $(BIN)/pytest -n 2 --dist loadfile -m plays

packer-check:
	@$(STAGE) packer $(WITH_VENV) scripts/packer-check

ci-mirror:
	@$(STAGE) ci-mirror env EFA_IMAGE_LOCK_OVERLAY=$(CI_LOCK_OVERLAY) \
	    $(BIN)/efa-image mirror create $(MIRROR) $(addprefix --name ,$(CI_MIRROR_ARTIFACTS))

# Debian 12 too: the source builds' scenarios and image tests, the SageMaker
# ones (Python 3.11) and the refusal scenarios run on it.
SECOND_BASE := efa-image/base:debian12
base-images:
	@$(STAGE) base-images $(BIN)/efa-image base --image $(EFA_IMAGE_BASE) --image $(SECOND_BASE)

base-image:
	@$(STAGE) base-image $(BIN)/efa-image base --image $(EFA_IMAGE_BASE)

second-base-image:
	@$(STAGE) base-image:debian12 $(BIN)/efa-image base --image $(SECOND_BASE)

MOLECULE_ALL := $(WITH_VENV) EFA_IMAGE_MIRROR=$(MIRROR) EFA_IMAGE_LOCK_OVERLAY=$(CI_LOCK_OVERLAY) \
    scripts/molecule-all

molecule: base-images
	@$(MOLECULE_ALL)

# Real `efa-image build` runs from the CI mirror (tests/image): a failing role, a
# build killed mid-compile and its rebuild, the image's contents and an MPI job
# across two containers of it. The flavour is efa-reduced (efa without
# aws-ofi-nccl and nccl-tests): the CI mirror cannot hold those two. The log
# shows what each test printed (job output, timings) and the slowest tests.
CI_FLAVOR := efa-reduced
CI_PROFILE := portable
IMAGE_TESTS ?= tests/image
IMAGE_STAGE ?= image-tests
# The base of the image tests' builds (tests/image/imagebuild.py reads EFA_IMAGE_BASE).
IMAGE_BASE ?= $(EFA_IMAGE_BASE)
image-tests: base-images
	@$(MAKE) --no-print-directory run-image-tests

run-image-tests:
	@$(STAGE) --pytest $(IMAGE_STAGE) env EFA_IMAGE_IMAGE_TESTS=1 EFA_IMAGE_MIRROR=$(MIRROR) \
	    EFA_IMAGE_BASE=$(IMAGE_BASE) EFA_IMAGE_TEST_FLAVOR=$(CI_FLAVOR) EFA_IMAGE_TEST_PROFILE=$(CI_PROFILE) \
	    $(WITH_VENV) pytest -v -rP --durations=20 $(IMAGE_TESTS)

# Regenerates the variable tables in roles/*/README.md from meta/argument_specs.yml.
docs:
	env PYTHONPATH=tools $(BIN)/python -m roledocs

# Removes the base images and test containers; the virtualenv stays (rm -rf .venv).
clean:
	-docker ps -aq --filter label=org.efa-image.test=molecule | xargs -r docker rm -f
	-$(BIN)/efa-image base --clean
	rm -rf .cache .pytest_cache .ruff_cache
