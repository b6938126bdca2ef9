"""One base for every error a user can cause, and the CLI prints each as a line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dsl.cli import main
from dsl.commands._launch_hosts import HostErrors
from dsl.distributed.hosts import HostError
from dsl.language.diagnostics import Diagnostic
from dsl.language.errors import DslError, LocatedError, RegistryError
from dsl.language.loader import LoadError
from dsl.language.pipeline import PipelineError
from dsl.language.plugins import PluginError

LOCATED = Diagnostic("p.yaml", 3, 5, "network.type", "unknown network type 'mpl'; did you mean 'mlp'?")

# One instance of every family, and the one line the CLI prints for it.
FAMILIES = [
    (DslError("checkpoint runs/x not found; run the pipeline first"), "dslrun: error: checkpoint runs/x not found; run the pipeline first"),
    (LoadError([LOCATED]), "p.yaml:3:5: error: network.type: unknown network type 'mpl'; did you mean 'mlp'?"),
    (PipelineError([LOCATED]), "p.yaml:3:5: error: network.type: unknown network type 'mpl'; did you mean 'mlp'?"),
    (RegistryError("no network of type 'x' is registered"), "dslrun: error: no network of type 'x' is registered"),
    (PluginError("--plugin x: no module named 'x'"), "dslrun: error: --plugin x: no module named 'x'"),
    (HostError("b", "connection refused"), "dslrun: error: b: reachable: connection refused"),
]


@pytest.mark.parametrize("error_class", [LocatedError, LoadError, PipelineError, RegistryError, PluginError,
                                         HostError, HostErrors])
def test_every_user_error_derives_from_the_one_base(error_class: type[Exception]) -> None:
    assert issubclass(error_class, DslError)


def test_a_registry_error_is_still_a_lookup_error() -> None:
    assert issubclass(RegistryError, LookupError)  # `lookup` keeps the contract of a mapping


@pytest.mark.parametrize(("error", "line"), FAMILIES, ids=[type(e).__name__ for e, _ in FAMILIES])
def test_the_cli_prints_one_line_for_each_family(
    error: DslError, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def raise_it(*_: object) -> None:
        raise error

    monkeypatch.setattr("dsl.commands.show.load_or_exit", raise_it)
    result = CliRunner().invoke(main, ["show", str(tmp_path / "p.yaml")], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [line]
    assert "Traceback" not in result.output


def test_a_plugin_that_cannot_be_imported_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", "--plugin", "no_such_plugin_module", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "dslrun: error: --plugin no_such_plugin_module: no module named 'no_such_plugin_module' "
        "(is the package installed, or on PYTHONPATH?)"
    ]
