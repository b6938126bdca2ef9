"""`dslrun list` and docs/components.md list the keys of mapping parameters, with types and defaults."""

from __future__ import annotations

from click.testing import CliRunner

from dsl.cli import main
from dsl.language.catalogue_doc import entries, render_markdown


def rows(section: str) -> dict[str, tuple[str, str]]:
    """parameter name -> (type, default) for every entry of `section`."""
    return {f"{e.name}:{p.name}": (p.type, p.default) for e in entries(section) for p in e.parameters}


def test_nullable_mappings_list_their_keys() -> None:
    callbacks = rows("callback")
    assert callbacks["checkpoint:save_best"] == ("mapping or null", "null")
    assert callbacks["checkpoint:save_best.monitor"] == ("string", "val/accuracy")
    assert callbacks["checkpoint:save_best.mode"] == ("one of: auto, min, max", "auto")
    runner = rows("runner")
    assert runner["runner:ps.variable_partitioner.min_shard_bytes"] == ("integer >= 1", "262144")
    assert runner["runner:ps.variable_partitioner.max_shards"] == ("integer >= 1 or null", "null")
    assert runner["runner:elastic.commit_every_n_steps"] == ("integer >= 1", "20")


def test_keys_whose_default_depends_on_the_type_show_each_types_default() -> None:
    modeler = rows("modeler")
    assert modeler["image_classification:optimizer.learning_rate"][1] == "0.1 (sgd, momentum, nesterov), 0.001 (adam, adamw, rmsprop)"
    assert modeler["image_classification:optimizer.momentum"][1] == "0.9 (momentum, nesterov), 0.0 (rmsprop)"
    assert modeler["image_classification:lr_schedule.boundaries"][1] == "required (piecewise)"
    assert modeler["image_classification:lr_schedule.decay_epochs"][1] == "null (cosine), required (exponential)"
    assert modeler["image_classification:lr_schedule.warmup_epochs"][1] == "0"


def test_list_and_markdown_show_the_nested_keys() -> None:
    text = CliRunner().invoke(main, ["list", "callbacks"]).stdout
    assert "      save_best.monitor: string = val/accuracy\n" in text
    markdown = render_markdown()
    assert "| `save_best.mode` | one of: auto, min, max | `auto` |" in markdown
    assert "| `ps.variable_partitioner.max_shards` | integer &gt;= 1 or null | `null` |" in markdown


def test_the_cifar_flip_warns_about_digits_and_text() -> None:
    _, default = rows("augmenter")["cifar:horizontal_flip"]
    [description] = [p.description for e in entries("augmenter") if e.name == "cifar"
                     for p in e.parameters if p.name == "horizontal_flip"]
    assert default == "true"
    assert "wrong for digits and text-like images" in description and "set false" in description
