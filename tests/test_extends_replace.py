"""`extends` replaces a section whose `type:` changed or that is tagged `!replace`; an inherited
foreign key says where it came from and how to replace it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dsl.cli import main

PARENT = """\
version: 1
name: parent
inputter: {type: synthetic, num_examples: {train: 32, val: 16}, image_shape: [8, 8, 3], num_classes: 3, batch_size: 8}
network:
  type: simple_cnn
  filters: [8]
modeler:
  type: image_classification
  optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.8}
runner: {max_epochs: 1}
"""


def files(tmp_path: Path, child: str) -> Path:
    (tmp_path / "parent.yaml").write_text(PARENT, encoding="utf-8")
    path = tmp_path / "child.yaml"
    path.write_text("version: 1\nname: child\nextends: parent.yaml\n" + child, encoding="utf-8")
    return path


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_a_changed_type_replaces_the_section(tmp_path: Path) -> None:
    child = files(tmp_path, "network: {type: mlp, hidden_units: [4]}\n")
    assert cli("validate", str(child))[0] == 0
    code, shown = cli("show", str(child))
    assert code == 0
    assert yaml.safe_load(shown)["network"] == {"type": "mlp", "num_classes": None, "hidden_units": [4],
                                                "activation": "relu", "dropout": 0.0}


def test_the_same_type_still_merges(tmp_path: Path) -> None:
    child = files(tmp_path, "network: {type: simple_cnn, kernel_size: 5}\n")
    network = yaml.safe_load(cli("show", str(child))[1])["network"]
    assert network["filters"] == [8] and network["kernel_size"] == 5


def test_replace_tag_keeps_no_base_key(tmp_path: Path) -> None:
    child = files(tmp_path, "modeler:\n  type: image_classification\n  optimizer: !replace {type: momentum}\n")
    assert cli("validate", str(child))[0] == 0
    optimizer = yaml.safe_load(cli("show", str(child))[1])["modeler"]["optimizer"]
    assert optimizer["learning_rate"] == 0.1 and optimizer["momentum"] == 0.9  # the defaults, not 0.05 / 0.8


def test_a_type_changed_by_set_names_the_inherited_key(tmp_path: Path) -> None:
    child = files(tmp_path, "")
    code, output = cli("validate", str(child), "--set", "network.type=mlp")
    assert code == 1
    line = next(line for line in output.splitlines() if "error:" in line)
    assert "parent.yaml:6:" in line and "unknown parameter 'filters' of network type 'mlp'" in line
    assert "inherited from" in line and "--set 'network={type: ...}'" in line


def test_a_misspelt_key_of_the_own_file_under_an_inherited_type_is_only_a_typo(tmp_path: Path) -> None:
    """The base sets the type, the pipeline's own file misspells a key: "inherited from" (with the
    pipeline's own line) and `!replace` sent a new user the wrong way; only the suggestion is right."""
    child = files(tmp_path, "network:\n  filter: [4]\n")
    code, output = cli("validate", str(child))
    assert code == 1
    assert output.splitlines()[0] == (f"{child}:5:3: error: network.filter: unknown parameter 'filter' of network "
                                      "type 'simple_cnn'; did you mean 'filters'?"), output


def test_append_tag_adds_items_after_the_bases_list(tmp_path: Path) -> None:
    """`callbacks: !append [...]` adds to the base's callbacks instead of replacing the list, and a
    mistake in an added item is located in the file that wrote it, at its index in the merged list."""
    files(tmp_path, "callbacks: [{type: train_basic}, {type: checkpoint}]\n")
    grandchild = tmp_path / "grandchild.yaml"
    grandchild.write_text("extends: child.yaml\nname: grandchild\ncallbacks: !append\n  - type: progress\n"
                          "  - {type: early_stopping, monitor: train/los}\n", encoding="utf-8")
    code, output = cli("validate", str(grandchild))
    assert code == 1 and output.splitlines()[0].startswith(f"{grandchild}:5:37: error: callbacks[3].monitor: "), output
    grandchild.write_text(grandchild.read_text(encoding="utf-8").replace("train/los", "train/loss"), encoding="utf-8")
    code, shown = cli("show", str(grandchild))
    assert code == 0, shown
    assert [c["type"] for c in yaml.safe_load(shown)["callbacks"]] == ["train_basic", "checkpoint", "progress", "early_stopping"]


def test_append_tag_without_a_base_list_is_the_list_and_on_a_mapping_an_error(tmp_path: Path) -> None:
    alone = files(tmp_path, "callbacks: !append [{type: progress}]\n")  # the parent has no callbacks
    code, shown = cli("show", str(alone))
    assert code == 0 and [c["type"] for c in yaml.safe_load(shown)["callbacks"]] == ["progress"]
    wrong = files(tmp_path, "network: !append {type: mlp}\n")
    code, output = cli("validate", str(wrong))
    assert code == 1 and f"{wrong}:4:10: error: network: the tag !append applies to a list (its items go after the " \
                         "base's), not to a mapping" in output


def test_a_plain_list_that_drops_a_bases_component_is_a_located_warning(tmp_path: Path) -> None:
    """Trial B7: a variant listing `callbacks:` without `!append` lost its base's `init_checkpoint` and
    trained from scratch without a word. The warning names what is dropped, where it was, and both
    fixes; `!replace` on the list says it is meant and silences it."""
    files(tmp_path, "callbacks:\n  - type: checkpoint\n  - {type: early_stopping, monitor: train/loss}\n")
    variant = tmp_path / "variant.yaml"
    variant.write_text("extends: child.yaml\ncallbacks:\n  - type: checkpoint\n  - type: progress\n", encoding="utf-8")
    code, output = cli("validate", str(variant))
    assert code == 0, output
    assert f"{variant}:2:1: warning: callbacks: this list replaces the whole `callbacks` list inherited from " \
           f"child.yaml and drops its early_stopping ({tmp_path / 'child.yaml'}:6)" in output, output
    assert "write `callbacks: !append [...]` to add to the inherited list, or `callbacks: !replace [...]`" in output
    variant.write_text("extends: child.yaml\ncallbacks: !replace\n  - type: checkpoint\n", encoding="utf-8")
    code, output = cli("validate", str(variant))
    assert code == 0 and "warning" not in output, output
    code, shown = cli("show", str(variant))
    assert code == 0 and [c["type"] for c in yaml.safe_load(shown)["callbacks"]] == ["checkpoint"], shown
    variant.write_text("extends: child.yaml\ncallbacks:\n  - type: progress\n  - {type: early_stopping, monitor: train/loss}\n"
                       "  - type: checkpoint\n",
                       encoding="utf-8")  # the same types in another order, one added: nothing dropped
    code, output = cli("validate", str(variant))
    assert code == 0 and "warning" not in output, output
    # An item the base inherited from its own base: the list replaced is still the base's (child.yaml),
    # the dropped item is located where it was written (trial B9 read the grandparent's line as the list).
    files(tmp_path, "callbacks: !append\n  - {type: early_stopping, monitor: train/loss}\n")
    (tmp_path / "parent.yaml").write_text(PARENT + "callbacks:\n  - type: checkpoint\n  - type: progress\n",
                                          encoding="utf-8")
    variant.write_text("extends: child.yaml\ncallbacks:\n  - type: checkpoint\n  - {type: early_stopping, monitor: train/loss}\n",
                       encoding="utf-8")
    code, output = cli("validate", str(variant))
    assert code == 0, output
    assert "inherited from child.yaml and drops its progress (" + f"{tmp_path / 'parent.yaml'}:" in output, output
    wrong = files(tmp_path, "runner: !replace 3\n")
    code, output = cli("validate", str(wrong))
    assert code == 1 and "the tag !replace applies to a mapping or a list" in output, output


@pytest.mark.slow
def test_a_run_without_a_checkpoint_callback_says_at_its_end_that_nothing_was_kept(tmp_path: Path) -> None:
    """Trial B8: a variant whose callbacks dropped the base's checkpoint trained, then `eval` said
    "train the pipeline first"; the warning at its start had scrolled away."""
    child = files(tmp_path, f"runner: {{max_epochs: 1, model_dir: {tmp_path / 'run'}}}\n")
    result = CliRunner().invoke(main, ["run", str(child)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last == ("dslrun: warning: no checkpoint callback: the trained weights were not kept (eval, predict and "
                    "export need them); add {type: checkpoint} to callbacks"), result.output


def test_merge_tag_changes_an_inherited_component_by_its_type(tmp_path: Path) -> None:
    """Trial B9: a head-only variant of a fine-tuning pipeline had to copy all six callbacks to change
    one key of its init_checkpoint. `!merge` merges each item into the base's item of its type and
    adds the others; a mistake in a merged key is located in the variant; a type the base lists
    twice is an error (which one is meant cannot be told)."""
    files(tmp_path, "callbacks:\n  - {type: checkpoint, every_n_epochs: 2}\n  - type: progress\n")
    variant = tmp_path / "variant.yaml"
    variant.write_text("extends: child.yaml\ncallbacks: !merge\n  - {type: checkpoint, max_to_keep: 7}\n"
                       "  - {type: early_stopping, monitor: train/loss}\n", encoding="utf-8")
    code, shown = cli("show", str(variant))
    assert code == 0, shown
    callbacks = yaml.safe_load(shown)["callbacks"]
    assert [c["type"] for c in callbacks] == ["checkpoint", "progress", "early_stopping"]
    assert callbacks[0]["every_n_epochs"] == 2 and callbacks[0]["max_to_keep"] == 7  # the base's key and the variant's
    variant.write_text(variant.read_text(encoding="utf-8").replace("max_to_keep: 7", "max_to_keep: -7"), encoding="utf-8")
    code, output = cli("validate", str(variant))
    assert code == 1 and output.startswith(f"{variant}:3:37: error: callbacks[0].max_to_keep: "), output
    files(tmp_path, "callbacks:\n  - {type: checkpoint, every_n_epochs: 2}\n  - {type: checkpoint, every_n_epochs: 3}\n")
    variant.write_text("extends: child.yaml\ncallbacks: !merge\n  - {type: checkpoint, max_to_keep: 7}\n", encoding="utf-8")
    code, output = cli("validate", str(variant))
    assert code == 1 and f"{variant}:3:5: error: callbacks[0]: !merge cannot tell which of the base's 2 checkpoint " \
                         f"items this changes (the first at {tmp_path / 'child.yaml'}:5)" in output, output


def test_remove_in_a_merge_list_takes_an_inherited_component_out(tmp_path: Path) -> None:
    """Trial B13 wanted "the fine-tuning pipeline without its init_checkpoint" for a from-scratch
    baseline, and had to copy every other callback under `!replace`. `!remove {type: X}` in a
    `!merge` list takes the base's X out; the items after it keep their own lines."""
    files(tmp_path, "callbacks:\n  - {type: checkpoint, every_n_epochs: 2}\n  - {type: progress}\n"
                    "  - {type: early_stopping, monitor: train/loss, patience: -1}\n")
    variant = tmp_path / "variant.yaml"
    variant.write_text("extends: child.yaml\ncallbacks: !merge\n  - !remove {type: progress}\n"
                       "  - {type: lr_logger}\n", encoding="utf-8")
    code, output = cli("validate", str(variant))
    # early_stopping moved from index 2 to 1: its error is still at its own line of child.yaml.
    assert code == 1 and output.startswith(f"{tmp_path / 'child.yaml'}:7:59: error: callbacks[1].patience: "), output
    files(tmp_path, "callbacks:\n  - {type: checkpoint, every_n_epochs: 2}\n  - {type: progress}\n")
    code, shown = cli("show", str(variant))
    assert code == 0, shown
    assert [c["type"] for c in yaml.safe_load(shown)["callbacks"]] == ["checkpoint", "lr_logger"]
    # A !remove that matches nothing takes no place: the item after it keeps its own line.
    variant.write_text("extends: child.yaml\ncallbacks: !merge\n  - !remove {type: mlflow}\n"
                       "  - {type: lr_logger, every_n_iters: 0}\n", encoding="utf-8")
    code, output = cli("validate", str(variant))
    assert code == 1 and f"{variant}:3:5: error: callbacks[0]: !remove {{type: mlflow}}: the base's callbacks has no " \
        "mlflow to take out" in output, output
    assert f"{variant}:4:38: error: callbacks[2].every_n_iters: " in output, output


@pytest.mark.parametrize(("child", "at", "words"), [
    ("callbacks: !merge\n  - !remove {type: mlflow}\n", "variant.yaml:3:5: error: callbacks[0]:",
     "!remove {type: mlflow}: the base's callbacks has no mlflow to take out (it lists checkpoint, progress)"),
    ("callbacks: !merge\n  - !remove {type: progress, every_n_iters: 5}\n", "variant.yaml:3:5: error: callbacks[0]:",
     "a !remove item names only the type of the base's component to take out"),
    ("callbacks:\n  - !remove {type: progress}\n", "variant.yaml:3:5: error: callbacks[0]:",
     "the tag !remove takes an item out of the base's list: use it in a list tagged !merge"),
    ("runner: !remove {type: x}\n", "variant.yaml:2:9: error: runner:", "the tag !remove applies to an item of a !merge list"),
    ("name: v\nversion: 1\nextends: null\n", "", ""),
])
def test_a_remove_that_cannot_work_is_a_located_error(tmp_path: Path, child: str, at: str, words: str) -> None:
    files(tmp_path, "callbacks:\n  - {type: checkpoint}\n  - {type: progress}\n")
    variant = tmp_path / "variant.yaml"
    if not words:  # a !merge list with !remove in a file that extends nothing
        variant.write_text("version: 1\nname: v\ncallbacks: !merge\n  - !remove {type: progress}\n", encoding="utf-8")
        code, output = cli("validate", str(variant))
        assert code == 1 and "callbacks[0]: !remove {type: progress}: there is no inherited list to take it out of" \
            in output, output
        return
    variant.write_text("extends: child.yaml\n" + child, encoding="utf-8")
    code, output = cli("validate", str(variant))
    assert code == 1 and f"{tmp_path / at}" in output and words in output, output


def test_the_items_of_a_plain_list_replacing_a_base_list_are_checked_like_any_other(tmp_path: Path) -> None:
    """Trial B16: the dropped-component warning at `callbacks:` hid every schema error below it, so a
    `save_bset` typo trained without a best model, and a missing `path` or `max_to_keep: -1` crashed the
    run with a traceback. The warning and the items' errors are both reported, each at its line."""
    files(tmp_path, "callbacks:\n  - type: progress\n  - type: checkpoint\n")
    variant = tmp_path / "variant.yaml"
    variant.write_text("extends: child.yaml\ncallbacks:\n  - type: checkpoint\n    save_bset: {monitor: val/accuracy}\n"
                       "    max_to_keep: -1\n  - type: init_checkpoint\n", encoding="utf-8")
    code, output = cli("validate", str(variant))
    assert code == 1, output
    assert f"{variant}:2:1: warning: callbacks: this list replaces the whole `callbacks` list" in output, output
    assert f"{variant}:4:5: error: callbacks[0].save_bset: unknown parameter 'save_bset' of callback type " \
           "'checkpoint'; did you mean 'save_best'?" in output, output
    assert f"{variant}:5:18: error: callbacks[0].max_to_keep: must be at least 1, got -1" in output, output
    assert f"{variant}:6:5: error: callbacks[1].path: missing required key `path`" in output, output
