# dslrun — set-up and everyday commands. Everything installs into .venv, nothing by hand.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   := data/synthetic
export TF_CPP_MIN_LOG_LEVEL ?= 2

HOROVOD_VERSION := 0.28.1
MPI4PY_VERSION  := 4.1.2

.PHONY: install horovod sshd slurm test test-fast test-multiprocess test-multihost demo bench bench-quick bench-quality bench-validate schema docs lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found; install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e ".[train,dev]"
	$(MAKE) --no-print-directory horovod
	$(MAKE) --no-print-directory sshd
	touch $(STAMP)

# Horovod is built from source against the venv's TensorFlow (TF, Gloo and MPI controllers).
# It needs OpenMPI and a C++ tool chain: installed with apt when root, else we say what to install.
# On a GPU machine with CUDA/NCCL: make install HOROVOD_GPU_OPERATIONS=NCCL (and TensorFlow with GPU support).
horovod:
	@if ! command -v mpirun >/dev/null || ! dpkg -s libopenmpi-dev >/dev/null 2>&1 || ! command -v cmake >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin cmake g++ >/dev/null; \
	  else \
	    echo "make: Horovod needs OpenMPI 4 and cmake; run: sudo apt-get install libopenmpi-dev openmpi-bin cmake g++"; exit 1; \
	  fi; \
	fi
	@$(BIN)/python -c "import horovod.tensorflow" 2>/dev/null || { \
	  echo "building horovod==$(HOROVOD_VERSION) against tensorflow (a few minutes)"; \
	  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
	  HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS=-j$$(nproc) \
	  $(BIN)/python -m pip install --quiet --no-build-isolation horovod==$(HOROVOD_VERSION); }
	$(BIN)/python -m pip install --quiet mpi4py==$(MPI4PY_VERSION)

# The multi-host tests (tests/testhosts.py) run a real sshd in each test host (a network namespace):
# Debian's openssh-server and iproute2, installed with apt when root. Without them those tests skip, so
# this is no error. sshd needs its privilege-separation directory; host keys come from the tests.
sshd:
	@if [ ! -x /usr/sbin/sshd ] || ! command -v ip >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      openssh-server iproute2 >/dev/null; \
	  else \
	    echo "make: the multi-host tests need sshd and ip (they skip without): sudo apt-get install openssh-server iproute2"; \
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

# The whole test suite, plus the shipped pipelines must validate. The system packages of the
# multi-host and Slurm tests are checked on every run (an older .venv predates them).
test: install sshd slurm lint
	$(BIN)/dslrun validate pipelines/
	$(BIN)/python -m pytest -q

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
	$(BIN)/dslrun validate pipelines/
	$(BIN)/dslrun pipelines/quickstart.yaml

bench-validate: install
	$(BIN)/python bench/validate_speed.py

# dslrun against hand-written Keras fit / tf.function / Horovod loops (see docs/benchmarks.md).
bench: install
	$(BIN)/python bench/run.py --write-docs

bench-quick: install
	$(BIN)/python bench/run.py --quick

# Every shipped pipeline at 1, 2 and 4 ranks (horovodrun, collective; ps workers): the val metric
# each ends with, into docs/benchmarks.md ("Moving a pipeline to N ranks"). About an hour here.
bench-quality: install
	$(BIN)/python bench/quality.py --write-docs

# Regenerate the committed files that come from the component registry.
schema: install
	$(BIN)/dslrun schema --output schemas/pipeline.schema.json
	$(BIN)/dslrun list --markdown > docs/components.md

# ruff on everything; mypy strict on the engine and the backends (configured in pyproject.toml),
# which are typed against the contracts of dsl/engine/contracts.py.
lint: install
	$(BIN)/python -m ruff check dsl backends tests bench
	$(BIN)/python -m mypy

clean:
	rm -rf $(VENV) runs data .pytest_cache
