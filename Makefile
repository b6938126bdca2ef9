# dslrun — set-up and everyday commands. Everything installs into .venv, nothing by hand.
# PYTHON: the interpreter for the venv; empty = the newest runnable 3.13 / 3.12 / 3.11 (tools/find-python).
PYTHON ?=
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   := data/synthetic
export TF_CPP_MIN_LOG_LEVEL ?= 2
# tf.keras is Keras 2 (tf_keras) for everything make starts; dslrun sets it itself too (dsl/__init__.py).
export TF_USE_LEGACY_KERAS ?= 1

HOROVOD_VERSION := 0.28.1
# The one change dslrun makes to Horovod's source before building it (see the file's header).
HOROVOD_PATCH   := tools/horovod-$(HOROVOD_VERSION)-tf2.21.patch
# And one to its installed launcher (Python only, so the cached wheel stays valid; see its header).
HOROVOD_RUNNER_PATCH := tools/horovod-$(HOROVOD_VERSION)-runner.patch
HOROVOD_SRC     := $(VENV)/src
MPI4PY_VERSION  := 4.1.2

.PHONY: install horovod sshd slurm postgres browser test test-launchers test-shipped test-fast test-multiprocess test-multihost demo bench bench-quick bench-quality bench-quality-seeds bench-sync-bn bench-scaling bench-validate bench-data-scale bench-stacks bench-sweep ding fortunes schema docs lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@python="$(PYTHON)"; [ -n "$$python" ] || python=$$(sh tools/find-python) || { \
	  echo "make: no Python 3.11, 3.12 or 3.13 that runs was found; install one (e.g. sudo apt-get install python3 python3-venv python3-dev" \
	       "on Debian 12+/Ubuntu 24.04, or pyenv install 3.13) or run make PYTHON=/path/to/python3.13"; exit 1; }; \
	  test -x $(BIN)/python || { echo "make: creating $(VENV) with $$python"; "$$python" -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e ".[train,dev]"
	$(MAKE) --no-print-directory horovod
	$(MAKE) --no-print-directory sshd
	$(MAKE) --no-print-directory postgres
	touch $(STAMP)

# Horovod is built from its 0.28.1 source (PyPI's sdist) against the venv's TensorFlow (TF, Gloo and MPI
# controllers), after $(HOROVOD_PATCH) is applied: 0.28.1 is Horovod's last release and predates TF 2.16.
# It needs OpenMPI, cmake, patch and a C++ tool chain: installed with apt when root, else we say what to install.
# The build (about 4 minutes here) is kept as a wheel in $(HOROVOD_CACHE), named by everything it depends on
# (Python X.Y, TensorFlow's version, the patch, the GPU operations), so another venv of the same Python
# (CI's second clone, `make clean install`) installs it in seconds; delete the folder to build afresh.
# On a GPU machine with CUDA/NCCL: make install HOROVOD_GPU_OPERATIONS=NCCL (see docs/stack.md, "GPU hosts").
HOROVOD_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dslrun/horovod
horovod:
	@if ! command -v mpirun >/dev/null || ! dpkg -s libopenmpi-dev >/dev/null 2>&1 || ! command -v cmake >/dev/null \
	    || ! command -v patch >/dev/null || ! command -v g++ >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin cmake g++ patch >/dev/null; \
	  else \
	    echo "make: Horovod needs OpenMPI 4, cmake, patch and g++; run: sudo apt-get install libopenmpi-dev openmpi-bin cmake g++ patch"; exit 1; \
	  fi; \
	fi
	@$(BIN)/python -c "import horovod.tensorflow" 2>/dev/null || { \
	  key=$$($(BIN)/python -c "import sys; from importlib.metadata import version; \
	    print(f'py{sys.version_info[0]}.{sys.version_info[1]}-tf{version(\"tensorflow\")}')")-$$(sha256sum $(HOROVOD_PATCH) | cut -c1-12)-$(or $(HOROVOD_GPU_OPERATIONS),cpu); \
	  wheels=$(HOROVOD_CACHE)/$(HOROVOD_VERSION)-$$key; \
	  if ! ls $$wheels/horovod-*.whl >/dev/null 2>&1; then \
	    echo "building horovod==$(HOROVOD_VERSION) from source against tensorflow, with $(HOROVOD_PATCH) (a few minutes)"; \
	    rm -rf $(HOROVOD_SRC) $$wheels.partial && mkdir -p $(HOROVOD_SRC) $$wheels.partial && \
	    $(BIN)/python -m pip download --quiet --no-deps --no-binary :all: -d $(HOROVOD_SRC) horovod==$(HOROVOD_VERSION) && \
	    tar -xzf $(HOROVOD_SRC)/horovod-$(HOROVOD_VERSION).tar.gz -C $(HOROVOD_SRC) && \
	    patch -p1 --quiet -d $(HOROVOD_SRC)/horovod-$(HOROVOD_VERSION) < $(HOROVOD_PATCH) && \
	    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
	    HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS=-j$$(nproc) \
	    $(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w $$wheels.partial $(HOROVOD_SRC)/horovod-$(HOROVOD_VERSION) && \
	    rm -rf $(HOROVOD_SRC) $$wheels && mv $$wheels.partial $$wheels || exit 1; \
	  else \
	    echo "horovod==$(HOROVOD_VERSION): the wheel built before for this Python, TensorFlow and patch ($$wheels)"; \
	  fi; \
	  $(BIN)/python -m pip install --quiet $$wheels/horovod-*.whl && \
	  $(BIN)/python -c "import json, pathlib, sys, horovod; from importlib.metadata import version; \
	    pathlib.Path(horovod.__file__).with_name('dslrun_build.json').write_text(json.dumps({'horovod': horovod.__version__, \
	    'tensorflow': version('tensorflow'), 'python': sys.version.split()[0], 'patch': '$(HOROVOD_PATCH)', \
	    'gpu_operations': '$(HOROVOD_GPU_OPERATIONS)' or None}))"; }
	@site=$$($(BIN)/python -c "import os, horovod; print(os.path.dirname(os.path.dirname(horovod.__file__)))") && \
	  if ! grep -q _built_on_disk $$site/horovod/common/util.py; then \
	    patch -p1 --quiet --forward -d $$site < $(HOROVOD_RUNNER_PATCH) || exit 1; \
	  fi && \
	  $(BIN)/python -c "from horovod.common.util import gloo_built, mpi_built; \
	    print(f'horovod: built with Gloo {gloo_built()}, with MPI {mpi_built()} (kept for horovodrun)')"
	$(BIN)/python -m pip install --quiet mpi4py==$(MPI4PY_VERSION)

# The multi-host tests (tests/testhosts.py) run a real sshd in each test host (a network namespace):
# Debian's openssh-server and iproute2, installed with apt when root, and nftables for the firewall of
# tests/test_multihost_exposure.py. Without them those tests skip, so this is no error. sshd needs its
# privilege-separation directory; host keys come from the tests.
sshd:
	@if [ ! -x /usr/sbin/sshd ] || ! command -v ip >/dev/null || ! command -v nft >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      openssh-server iproute2 nftables >/dev/null; \
	  else \
	    echo "make: the multi-host tests need sshd, ip and nft (they skip without): sudo apt-get install openssh-server iproute2 nftables"; \
	  fi; \
	fi
	@if [ "$$(id -u)" = 0 ]; then mkdir -p /run/sshd && chmod 0755 /run/sshd; fi

# The Slurm test (tests/test_slurm.py) starts a one-node cluster of its own: Debian's slurm-wlm
# daemons and munge, installed with apt when root (the test skips, naming them, without).
slurm:
	@if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
	    || ! command -v munged >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      slurmctld slurmd slurm-client munge >/dev/null; \
	  else \
	    echo "make: the Slurm test needs slurm-wlm (it skips without): sudo apt-get install slurmctld slurmd slurm-client munge"; \
	  fi; \
	fi

# The documentation site's browser test (tests/test_docs_site.py) opens it in Debian's chromium through
# chromedriver, installed with apt when root (the test skips, naming them, without).
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      chromium chromium-driver >/dev/null; \
	  else \
	    echo "make: the docs site's browser test needs chromium (it skips without): sudo apt-get install chromium chromium-driver"; \
	  fi; \
	fi

# The PostgreSQL test of sweeps (tests/test_sweep_postgres.py) starts a server of its own, on the test
# hosts' bridge (a second driver runs inside one of them, see `sshd`): Debian's postgresql, installed
# with apt when root (the test skips, naming it, without).
postgres:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      postgresql >/dev/null; \
	  else \
	    echo "make: the PostgreSQL sweep test needs postgresql (it skips without): sudo apt-get install postgresql"; \
	  fi; \
	fi

# The whole test suite, after the shipped pipelines validate (no TensorFlow; the suite builds and
# trains every one of them, so `validate --build` here would only repeat that work). The system
# packages of the multi-host, Slurm and PostgreSQL tests are checked on every run (an older .venv
# predates them). pytest-xdist runs
# TEST_WORKERS workers (a worker per core), a module's tests on one worker, the heaviest modules
# first (tests/conftest.py). The slowest 25 tests are listed at the end.
TEST_WORKERS ?= auto
test: install sshd slurm postgres browser fortunes lint docs
	$(BIN)/dslrun validate pipelines/
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 -m "not full_matrix"

# Every shipped pipeline under every launcher (tests/test_shipped_pipelines.py, about 12 minutes here):
# `make test` runs each task under horovodrun --gloo, the parameter-server cluster and TensorFlow's
# allreduce, and every launcher with at least one shipped file; run this before a release and after changing a
# launcher, a backend or a file in pipelines/.
test-shipped: install
	$(BIN)/python -m pytest -q --durations=10 tests/test_shipped_pipelines.py

# What differs between Python versions, for a second Python's venv (CI: make install PYTHON=python3.11
# VENV=.venv311, then this with VENV=.venv311): the commands that must not import TensorFlow, and the
# quickstart under every launcher (dslrun, horovodrun --gloo/--mpi, mpirun, launch --backend ps and
# collective). `make test` runs every shipped pipeline under every launcher.
test-launchers: install
	$(BIN)/dslrun validate pipelines/
	$(BIN)/python -m pytest -q --durations=10 tests/test_no_tensorflow.py tests/test_shipped_pipelines.py \
	  -k "test_no_tensorflow or (quickstart and not validate_as_one_process)"

# The multi-rank tests alone (horovodrun, mpirun, local clusters).
test-multiprocess: install
	$(BIN)/python -m pytest -q -m multiprocess

# Horovod across two test hosts (network namespaces with their own sshd; needs root).
test-multihost: install
	$(BIN)/python -m pytest -q -m multihost

# Everything but the end-to-end training runs.
test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not multiprocess"

$(DATA)/train.csv: | install
	$(BIN)/dslrun data synthetic --out $(DATA)

# Install, generate the small learnable data set if missing, train the quickstart pipeline.
demo: install $(DATA)/train.csv
	$(BIN)/dslrun validate --data pipelines/quickstart.yaml
	$(BIN)/dslrun pipelines/quickstart.yaml

bench-validate: install
	$(BIN)/python bench/validate_speed.py

# What dslrun costs as the data grows to ImageNet's 1.28M rows (docs/benchmarks.md, "Cost of scale: data").
# Needs GNU time (apt-get install time). About 40 minutes and 1.5 GB of temporary files here.
bench-data-scale: install
	@test -x /usr/bin/time || { echo "make: bench-data-scale measures peak memory with GNU time: sudo apt-get install time"; exit 1; }
	$(BIN)/python bench/data_scale.py

# dslrun against hand-written Keras fit / tf.function / Horovod loops (see docs/benchmarks.md).
bench: install
	$(BIN)/python bench/run.py --write-docs

bench-quick: install
	$(BIN)/python bench/run.py --quick

# Every shipped pipeline at 1, 2 and 4 ranks (horovodrun, collective; ps workers): the val metric
# each ends with, into docs/benchmarks.md ("Moving a pipeline to N ranks"). About an hour here.
# Then translation on a real corpus (Debian's Ding dictionary, trans-de-en, installed with apt when
# root): dslrun's shipped Transformer against keras.io's written by hand, the same wall time.
# Then text classification on real short texts (Debian's fortunes, four topics): the shipped
# text pipeline against TF-IDF with logistic regression (scikit-learn), the floor, on 5 folds.
bench-quality: install ding fortunes
	$(BIN)/python bench/quality.py --write-docs
	$(BIN)/python bench/translation_quality.py --write-docs
	$(BIN)/python bench/text_quality.py --seeds 5,1,2 --write-docs

ding:
	@if [ ! -f /usr/share/trans/de-en ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq trans-de-en >/dev/null; \
	  else \
	    echo "make: the translation bench reads Debian's Ding dictionary: sudo apt-get install trans-de-en"; \
	  fi; \
	fi

# Debian's fortune-cookie quotations: real short texts for the text pipeline's floor
# (tests/test_text_real_data.py, which skips without) and bench/text_quality.py.
fortunes:
	@if [ ! -f /usr/share/games/fortunes/computers ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fortunes >/dev/null; \
	  else \
	    echo "make: the text test and bench read Debian's fortune-cookie quotations (the test skips without): sudo apt-get install fortunes"; \
	  fi; \
	fi

# One row of it judged on several seeds per cell (docs/benchmarks.md), e.g.
# make bench-quality-seeds PIPELINE=detection.yaml SEEDS=5,1,2 SET=runner.max_epochs=30
# (IMAGES=N: train images of the generated image set, for the image-classification rows;
# CELLS=kind:ranks,...: e.g. horovod:2,collective:2 — a ps file's default is ps:1,ps:2,ps:4)
bench-quality-seeds: install
	@test -n "$(PIPELINE)" || { echo "make: bench-quality-seeds needs PIPELINE=<a file in pipelines/>, e.g. detection.yaml"; exit 1; }
	$(BIN)/python bench/quality_seeds.py --pipeline $(PIPELINE) $(if $(CELLS),--cells $(CELLS)) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(IMAGES),--images $(IMAGES)) $(foreach s,$(SET),--set $(s))

# What synchronised batch norm costs a two-rank step at 8 and 16 per rank (docs/benchmarks.md,
# "Synchronised batch norm: what auto costs"). About 15 minutes here.
bench-sync-bn: install
	$(BIN)/python bench/sync_bn_cost.py

# What a sweep's trial costs beside its training (docs/benchmarks.md, "Sweeps"): one process, then 2 Horovod ranks.
bench-sweep: install
	$(BIN)/python bench/sweep_overhead.py --trials 3
	$(BIN)/python bench/sweep_overhead.py --trials 2 --ranks 2

# The gradient exchange across hosts (docs/benchmarks.md, "Cost of scale: clusters past one machine"):
# Horovod (Gloo, MPI) and the collective backend at 2, 4 and 8 ranks, one per test host (network
# namespaces, root), on links shaped to 1, 2.5 and 10 Gbit/s by tc's token bucket; the ring model fitted
# to it and the projection at 8, 64 and 512 ranks. About 50 minutes a repetition here (REPEATS=2 interleaves
# two). Needs tc: apt-get install iproute2.
bench-scaling: install
	@command -v tc >/dev/null || { echo "make: bench-scaling shapes links with tc: apt-get install iproute2"; exit 1; }
	$(BIN)/python bench/scaling.py $(if $(REPEATS),--repeats $(REPEATS))

# This stack against another venv's (e.g. an older checkout's): make bench-stacks OLD=/path/to/.venv/bin/python
bench-stacks: install
	@test -n "$(OLD)" || { echo "make: bench-stacks needs OLD=/path/to/other/.venv/bin/python"; exit 1; }
	$(BIN)/python bench/stacks.py --old $(OLD) --new $(BIN)/python

# The documentation site (mkdocs.yml) into site/; strict, so a broken link, a missing page or a page
# left out of the navigation fails (make test builds it).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet

# Regenerate the committed files that come from the component registry.
schema: install
	$(BIN)/dslrun schema --output schemas/pipeline.schema.json
	$(BIN)/dslrun list --markdown > docs/components.md

# ruff on everything; mypy strict on all of dsl/ and backends/ (configured in pyproject.toml): the
# components' builders are typed against the contracts of dsl/engine/contracts.py.
lint: install
	$(BIN)/python -m ruff check dsl backends tests bench examples
	$(BIN)/python -m mypy

clean:
	rm -rf $(VENV) runs data .pytest_cache site
