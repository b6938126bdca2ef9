"""extends, ${ENV} and --set: the merged tree, and positions that follow the values."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsl.language.resolve import resolve


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def messages(tree) -> list[str]:
    return [d.format_text() for d in tree.diagnostics]


BASE = """\
version: 1
name: base
inputter:
  type: synthetic
  image_shape: [8, 8, 3]
  batch_size: 8
network:
  type: mlp
  hidden_units: [16, 16]
runner:
  max_epochs: 3
  workflow: [[train, 1], [val, 1]]
"""


def test_extends_deep_merges_mappings_and_replaces_lists(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", BASE)
    child = write(tmp_path, "child.yaml", "extends: base.yaml\nnetwork:\n  hidden_units: [4]\nrunner:\n  max_epochs: 1\n")
    tree = resolve(child, environ={})
    assert tree.diagnostics == []
    assert "extends" not in tree.value
    assert tree.value["network"] == {"type": "mlp", "hidden_units": [4]}
    assert tree.value["runner"] == {"max_epochs": 1, "workflow": [["train", 1], ["val", 1]]}
    assert tree.value["inputter"]["image_shape"] == [8, 8, 3]
    # Each value keeps the file and line it came from.
    assert tree.sources.get(("runner", "max_epochs")).value.file == str(child)
    assert tree.sources.get(("runner", "max_epochs")).value.line == 5
    workflow = tree.sources.get(("runner", "workflow", 1))
    assert workflow.value.file.endswith("base.yaml") and workflow.value.line == 12


def test_extends_list_merges_in_order_relative_to_the_extending_file(tmp_path: Path) -> None:
    write(tmp_path, "bases/a.yaml", "name: a\nseed: 1\ndescription: from a\nrunner: {max_epochs: 1}\n")
    write(tmp_path, "bases/b.yaml", "extends: a.yaml\nname: b\nseed: 2\ndescription: from b\n")
    write(tmp_path, "bases/c.yaml", "seed: 3\ndescription: from c\nname: c\n")
    top = write(tmp_path, "top.yaml", "extends: [bases/b.yaml, bases/c.yaml]\nversion: 1\n")
    tree = resolve(top, environ={})
    assert tree.diagnostics == []
    # c's seed over b's over a's; no base's name or description: they describe their own file (a file
    # without a name is named after itself).
    assert tree.value == {"seed": 3, "runner": {"max_epochs": 1}, "version": 1}


def test_extends_cycle_names_the_chain(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "extends: b.yaml\nversion: 1\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\n")
    tree = resolve(tmp_path / "a.yaml", environ={})
    [message] = messages(tree)
    assert "b.yaml:1:10: error: extends: extends cycle:" in message
    assert message.endswith("a.yaml → " + str(tmp_path / "b.yaml") + " → " + str(tmp_path / "a.yaml"))


def test_extends_missing_file_is_located_at_the_extends_value(tmp_path: Path) -> None:
    top = write(tmp_path, "top.yaml", "version: 1\nextends: [nope.yaml]\n")
    [message] = messages(resolve(top, environ={}))
    assert message.startswith(f"{top}:2:11: error: extends[0]: base file 'nope.yaml' not found")
    assert "relative to the file that names them" in message


def test_extends_must_be_file_names(tmp_path: Path) -> None:
    top = write(tmp_path, "top.yaml", "version: 1\nextends: {a: 1}\n")
    [message] = messages(resolve(top, environ={}))
    assert "expected a file name or a list of file names" in message


def test_errors_in_a_base_file_point_into_the_base(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", "a: 1\na: 2\n")
    top = write(tmp_path, "top.yaml", "extends: base.yaml\nversion: 1\n")
    [message] = messages(resolve(top, environ={}))
    assert message.startswith(f"{tmp_path / 'base.yaml'}:2:1: error: a: duplicate key")


ENV_FILE = """\
version: 1
name: ${RUN:-demo}-run
description: 'cost: $${HOME} stays'
seed: ${SEED:-7}
runner:
  model_dir: ${OUT}/x
  max_epochs: ${EPOCHS}
"""


def test_env_substitution(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", ENV_FILE)
    tree = resolve(path, environ={"OUT": "/data", "EPOCHS": "4", "RUN": "r1"})
    assert tree.diagnostics == []
    assert tree.value["name"] == "r1-run"
    assert tree.value["description"] == "cost: ${HOME} stays"
    assert tree.value["seed"] == 7  # a whole-value reference is read as YAML
    assert tree.value["runner"] == {"model_dir": "/data/x", "max_epochs": 4}


def test_env_unset_without_default_is_located(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", ENV_FILE)
    found = messages(resolve(path, environ={"EPOCHS": "2"}))
    assert found == [
        (
            f"{path}:6:14: error: runner.model_dir: environment variable OUT is not set; "
            "set it, or give a default: ${OUT:-value}"
        )
    ]


def test_env_malformed_reference(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "version: 1\nname: ${oops\n")
    [message] = messages(resolve(path, environ={}))
    assert "name: malformed reference" in message


def test_env_overridden_value_needs_no_variable(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", "runner:\n  model_dir: ${NEVER_SET}\n")
    top = write(tmp_path, "top.yaml", "extends: base.yaml\nrunner:\n  model_dir: here\n")
    tree = resolve(top, environ={})
    assert tree.diagnostics == [] and tree.value["runner"]["model_dir"] == "here"


def test_set_existing_missing_optional_and_indexed_paths(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", BASE)
    overrides = [
        "runner.max_epochs=null",
        "runner.max_iters=10",  # not in the file, but the schema knows it
        "runner.workflow[1][1]=2",
        "runner.workflow.0.1=3",
        "network.hidden_units=[1, 2, 3]",
        "augmenter.type=none",  # a whole section the file omits
    ]
    tree = resolve(path, overrides, environ={})
    assert messages(tree) == []
    assert tree.value["runner"] == {"max_epochs": None, "max_iters": 10, "workflow": [["train", 3], ["val", 2]]}
    assert tree.value["network"]["hidden_units"] == [1, 2, 3]
    assert tree.value["augmenter"] == {"type": "none"}
    origin = tree.sources.get(("network", "hidden_units", 2))
    assert (origin.value.file, origin.value.line, origin.value.col) == ("<--set>", 5, 29)


def test_set_reaches_a_key_holding_dots_when_it_is_quoted(tmp_path: Path) -> None:
    """A sweep's parameters are named by dotted paths (`network.depth`); split at every dot,
    `--set sweep.parameters.network.depth.values=...` reached no such key. Quoted, it does."""
    path = write(tmp_path, "p.yaml", BASE + "sweep:\n  parameters:\n    network.depth: {type: choice, values: [20, 32]}\n")
    for quoted in ('sweep.parameters["network.depth"].values=[20, 44]', "sweep.parameters['network.depth'].values=[20, 44]"):
        tree = resolve(path, [quoted], environ={})
        assert messages(tree) == [] and tree.value["sweep"]["parameters"]["network.depth"]["values"] == [20, 44]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("runner.max_iter=10", "<--set>:1:8: error: runner.max_iter: no such key: runner has no 'max_iter'; did you mean 'max_iters'?"),
        ("netwrk.type=mlp", "<--set>:1:1: error: netwrk: no such key: a pipeline has no 'netwrk'; did you mean 'network'?"),
        ("runner.workflow[5][0]=val", "<--set>:1:16: error: runner.workflow[5]: index 5 is out of range: runner.workflow has 2 item(s)"),
        ("network.type.x=1", "<--set>:1:14: error: network.type.x: cannot set 'x' inside network.type, which is a string"),
        ("runner=", None),  # null is a value (the schema then rejects it)
        ("no_equals_sign", "<--set>:1:1: error: --set expects PATH=VALUE"),
        ("network.hidden_units=[1", "<--set>:1:24: error: invalid YAML"),
        ("extends=x.yaml", "<--set>:1:1: error: extends: extends cannot be changed with --set"),
        ("callbacks[0].type=progress", "callbacks: the pipeline does not write this list"),
    ],
)
def test_set_errors_are_located_with_suggestions(tmp_path: Path, override: str, expected: str | None) -> None:
    path = write(tmp_path, "p.yaml", BASE)
    found = messages(resolve(path, [override], environ={}))
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_set_values_are_not_substituted(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", BASE)
    tree = resolve(path, ["name=${X}"], environ={"X": "nope"})
    assert tree.value["name"] == "${X}"


def test_extends_only_names_yaml_files(tmp_path) -> None:
    from dsl.language.pipeline import check_pipeline

    secret = tmp_path / "secret.txt"
    secret.write_text("password: hunter2\n")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("version: 1\nextends: secret.txt\n")
    resolved, diagnostics = check_pipeline(pipeline)
    assert resolved is None
    messages = [d.format_text() for d in diagnostics]
    assert any("p.yaml:2:10: error: extends: base file 'secret.txt' is not a pipeline" in m for m in messages)
    assert not any("hunter2" in m for m in messages)


def test_a_missing_base_named_like_a_shipped_pipeline_offers_it(tmp_path: Path) -> None:
    """Trial A16 wrote `extends: detection.yaml` in a folder of its own, as the docs' examples read;
    "not found" said where it looked but not where the shipped file is."""
    from dsl.language.resolve import SHIPPED

    assert (SHIPPED / "detection.yaml").is_file()
    pipeline = write(tmp_path, "mine.yaml", "extends: detection.yaml\nname: mine\n")
    (message,) = messages(resolve(pipeline))
    assert f"{pipeline}:1:10: error: extends: base file 'detection.yaml' not found (looked for " in message
    shipped = SHIPPED / "detection.yaml"  # written the shorter way: from here, or whole
    written = min(os.path.relpath(shipped, tmp_path), str(shipped), key=len)
    assert message.endswith("extends paths are relative to the file that names them; did you mean the shipped one? "
                            f"extends: {written}"), message
    (other,) = messages(resolve(write(tmp_path, "other.yaml", "extends: no_such_base.yaml\nname: other\n")))
    assert other.endswith("extends paths are relative to the file that names them"), other
