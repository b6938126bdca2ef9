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


def test_an_error_found_while_building_is_located_at_the_key_it_names(tmp_path: Path) -> None:
    """`dslrun run` with a train file that does not exist said `dslrun: error: inputter.train: ...`
    where `validate --data` said `p.yaml:6:10: error: ...` (a trial); a bad row, `x.csv line 5:`,
    where validate said `x.csv:5:1:`. A build error naming a key of the pipeline, or a data file's
    line, is now located like validate's."""
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nname: p\ninputter:\n  type: image_classification_csv\n  num_classes: 2\n"
                    f"  train: {tmp_path / 'nowhere.csv'}\n  image_shape: [8, 8, 3]\n  batch_size: 2\n"
                    "network: {type: mlp, hidden_units: [4]}\nmodeler: {type: image_classification}\n"
                    f"runner: {{max_epochs: 1, model_dir: {tmp_path / 'run'}, workflow: [[train, 1]]}}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(path)], catch_exceptions=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.splitlines()[-1].startswith(f"{path}:6:10: error: inputter.train: {tmp_path / 'nowhere.csv'} "
                                                     "does not exist"), result.stderr
    rows = tmp_path / "train.csv"
    rows.write_text("a.png,7\nb.png,1\n", encoding="utf-8")  # a label outside 0..1, found as the CSV is read
    path.write_text(path.read_text().replace(str(tmp_path / "nowhere.csv"), str(rows)), encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(path)], catch_exceptions=False)
    assert result.exit_code == 1 and result.stderr.splitlines()[-1].startswith(f"{rows}:1:1: error: "), result.stderr


def test_a_plugin_that_cannot_be_imported_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", "--plugin", "no_such_plugin_module", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "dslrun: error: --plugin no_such_plugin_module: no module named 'no_such_plugin_module' "
        "(is the package installed, or on PYTHONPATH?)"
    ]
