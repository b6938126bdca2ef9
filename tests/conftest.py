"""What every test shares: Keras 2 for TensorFlow, a temporary directory for the processes the tests
start, and how the tests are spread over pytest-xdist workers.

TF_USE_LEGACY_KERAS is set before any test module imports TensorFlow: tf.keras is Keras 2
(tf_keras), as under dslrun. dsl/__init__.py sets the same default; a test module that imports
TensorFlow before any dsl module would otherwise get Keras 3. Subprocesses the tests start inherit it.
"""

import os
import shutil
import tempfile

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# Every process a test starts puts its temporary files (autograph's modules, Open MPI's session
# directory) in one directory per pytest process, removed when that process ends: the processes
# the tests kill on purpose run no exit handler and would leave theirs in /tmp. pytest's own
# tmp_path stays in the system's temporary directory (read before TMPDIR changes), where pytest
# keeps the last three sessions for a look after a failure.
tempfile.gettempdir()
CHILDREN_TMP = tempfile.mkdtemp(prefix="dsltest-")
os.chmod(CHILDREN_TMP, 0o1777)  # as /tmp: the tests' PostgreSQL server runs as its own user
os.environ["TMPDIR"] = CHILDREN_TMP


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(CHILDREN_TMP, ignore_errors=True)


def _weight(item: pytest.Item) -> int:
    """A test's rough cost from its marks: a multi-rank or multi-host job costs most."""
    if item.get_closest_marker("multiprocess") or item.get_closest_marker("multihost"):
        return 10
    return 3 if item.get_closest_marker("slow") else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order the modules run in, heaviest first, for pytest-xdist (`make test` runs a worker per core).

    `make test` passes `--dist loadfile`: a module's tests stay on one worker, so its module
    fixtures (generated data, a run trained once and looked at by several tests) are made once.
    Two workers may each hold test hosts at once: tests/testhosts.py gives every session its own
    names and subnet. With `--no-loadscope-reorder` xdist hands out the modules in this order,
    a free worker taking the next: the long ones start early and the short ones fill in at the
    end. Each module's tests keep their own order.
    """
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.module.__name__, []).append(item)
    ordered = sorted(modules.values(), key=lambda module: -sum(map(_weight, module)))
    items[:] = [item for module in ordered for item in module]
