"""What every test shares: Keras 2 for TensorFlow, and how the tests are spread over pytest-xdist workers.

TF_USE_LEGACY_KERAS is set before any test module imports TensorFlow: tf.keras is Keras 2
(tf_keras), as under dslrun. dsl/__init__.py sets the same default; a test module that imports
TensorFlow before any dsl module would otherwise get Keras 3. Subprocesses the tests start inherit it.
"""

import os

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def _weight(item: pytest.Item) -> int:
    """A test's rough cost from its marks: a multi-rank or multi-host job costs most."""
    if item.get_closest_marker("multiprocess") or item.get_closest_marker("multihost"):
        return 10
    return 3 if item.get_closest_marker("slow") else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Which tests may run side by side under pytest-xdist (`make test` runs a worker per core).

    A module's tests stay on one worker (`--dist loadgroup`), so its module fixtures (generated
    data, a run trained once and looked at by several tests) are made once. Every module that uses
    the test hosts (network namespaces with fixed names, one sshd each, a session fixture) shares
    one group: two sets of hosts cannot exist at once. The groups are ordered heaviest first (with
    `--no-loadscope-reorder` xdist keeps that order): a free worker takes the next group, so the
    long ones start early and the short ones fill in at the end. Without xdist the marks do
    nothing and only the order changes; each module's tests keep theirs.
    """
    with_hosts = {item.module.__name__ for item in items if "test_hosts" in getattr(item, "fixturenames", ())}
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        module = item.module.__name__
        group = "test hosts" if module in with_hosts else module
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)
    ordered = sorted(groups.values(), key=lambda group: -sum(map(_weight, group)))
    items[:] = [item for group in ordered for item in group]
