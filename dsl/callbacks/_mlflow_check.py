"""Whether a pipeline that tracks with MLflow can: the package is an optional extra.

The mlflow callback registers it as its check (`register(checks=...)`): `dslrun validate` runs it
without importing MLflow.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from dsl.language.diagnostics import Diagnostic, SourceMap

INSTALL_HINT = 'install MLflow with: pip install "dslrun[mlflow]" (or pip install mlflow)'


def check_mlflow_installed(pipeline: dict[str, Any], sources: SourceMap) -> list[Diagnostic]:
    """A pipeline with the mlflow callback needs the mlflow package (looked up, not imported)."""
    for index, callback in enumerate(pipeline.get("callbacks") or []):
        if isinstance(callback, dict) and callback.get("type") == "mlflow" and importlib.util.find_spec("mlflow") is None:
            path = ("callbacks", index, "type")
            return [Diagnostic.at(sources.locate(path), path, f"the mlflow callback needs MLflow, which is not installed; "
                                                              f"{INSTALL_HINT}")]
    return []
