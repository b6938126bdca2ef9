"""A small resolved pipeline, typed as the engine reads it (dsl.language.resolved), for tests
that build a component or drive callbacks without a pipeline file."""

from __future__ import annotations

from typing import Any

from dsl.language.defaults import fill_defaults
from dsl.language.resolved import Pipeline

BASE: dict[str, Any] = {
    "version": 1,
    "name": "tiny",
    "inputter": {"type": "image_classification_csv", "train": "train.csv"},
    "network": {"type": "mlp"},
    "modeler": {"type": "image_classification"},
    "runner": {"model_dir": "runs/tiny", "max_epochs": 1},
}


def typed_pipeline(**sections: Any) -> Pipeline:
    """BASE with these top-level sections (a mapping section is merged into BASE's, a list
    replaces it), every default filled as `dslrun validate` fills them."""
    tree = {key: dict(value) if isinstance(value, dict) else value for key, value in BASE.items()}
    for key, value in sections.items():
        tree[key] = {**tree.get(key, {}), **value} if isinstance(value, dict) else value
    return Pipeline.from_resolved(fill_defaults(tree))
