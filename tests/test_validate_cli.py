"""`dslrun validate`, `show`, `schema` and `list` on good and bad pipelines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dsl.cli import main
from dsl.language import registry
from dsl.language.catalogue_doc import render_markdown
from dsl.language.resolved import Pipeline
from dsl.language.schema import schema_text


def require(kind: str, *names: str) -> None:
    missing = [n for n in names if n not in registry.types(kind)]
    if missing:
        pytest.skip(f"{kind} type(s) {', '.join(missing)} not registered yet")


@pytest.fixture(autouse=True)
def catalogue() -> None:
    require("inputter", "synthetic")
    require("network", "mlp")
    require("modeler", "image_classification")
    require("callback", "checkpoint", "progress")


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def write(directory: Path, name: str, text: str | bytes) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


GOOD = """\
version: 1
name: tiny
inputter:
  type: synthetic
  num_examples: {train: 32, val: 16}
  image_shape: [8, 8, 3]
  num_classes: 3
  batch_size: 8
network:
  type: mlp
  hidden_units: [8]
modeler:
  type: image_classification
  optimizer:
    type: momentum
    momentum: 0.9
callbacks:
  - type: checkpoint
  - type: progress
runner:
  max_epochs: 2
  workflow: [[train, 1], [val, 1]]
"""


def good(tmp_path: Path, name: str = "good.yaml") -> Path:
    return write(tmp_path, name, GOOD)


def variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    assert old in GOOD, old
    return write(tmp_path, name, GOOD.replace(old, new))


# ------------------------------------------------------------------ validate: good files


def test_valid_file_exit_0_and_summary(tmp_path: Path) -> None:
    result = run("validate", str(good(tmp_path)))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[0] == "1 file, 0 invalid, 0 errors"
    assert result.stderr.strip().splitlines()[1].startswith("(the data was not read: dslrun validate --data ")


def test_three_mistakes_three_located_errors_with_suggestions(tmp_path: Path) -> None:
    require("network", "resnet_cifar")
    text = GOOD.replace("momentum: 0.9", "momemtum: 0.9").replace("type: mlp\n  hidden_units: [8]", "type: resnet_cifra")
    path = write(tmp_path, "three.yaml", text.replace("batch_size: 8", "batch_size: -8"))
    result = run("validate", str(path))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines == [
        f"{path}:8:15: error: inputter.batch_size: must be at least 1, got -8",
        f"{path}:10:9: error: network.type: unknown network type 'resnet_cifra'; did you mean 'resnet_cifar'?",
        (
            f"{path}:15:5: error: modeler.optimizer.momemtum: unknown parameter 'momemtum' of optimizer type "
            "'momentum'; did you mean 'momentum'?"
        ),
    ]
    assert result.stderr.strip() == "1 file, 1 invalid, 3 errors"


# ------------------------------------------------------------------ validate: schema errors


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("version: 1", "version: 2", ":1:10: error: version: unsupported version 2; supported versions: 1"),
        ("version: 1", "version: '1'", "version: unsupported version '1'; supported versions: 1"),
        ("name: tiny", "nmae: tiny", ":2:1: error: nmae: unknown key 'nmae'; did you mean 'name'?"),
        ("name: tiny", "name: tiny\nnetwrok: {}", ":3:1: error: netwrok: unknown key 'netwrok'; did you mean 'network'?"),
        ("batch_size: 8", "batch_size: abc", "inputter.batch_size: expected an integer, got 'abc' (string)"),
        ("batch_size: 8", "batch_size: 8.5", "inputter.batch_size: expected an integer, got 8.5 (number)"),
        ("hidden_units: [8]", "hidden_units: 8", "network.hidden_units: expected a list, got 8 (integer)"),
        # NumPy's generator, seeded with it, takes no more than 32 bits: was a traceback an epoch in.
        ("name: tiny", "name: tiny\nseed: 4294967296", ":3:7: error: seed: must be at most 4294967295, got 4294967296"),
        ("  - type: progress", "  - type: progres", "callbacks[1].type: unknown callback type 'progres'; did you mean 'progress'?"),
        ("  - type: progress", "  - {}", "callbacks[1].type: missing `type`; choose one of:"),
        ("  - type: progress", "  - 3", "callbacks[1]: expected a mapping, got 3 (integer)"),
        ("[val, 1]]", "[vall, 1]]", "runner.workflow[1][0]: expected one of 'train', 'val', got 'vall' (string); did you mean 'val'?"),
        ("max_epochs: 2", "max_epochs: 2\n  jit_compile: fast", "runner.jit_compile: expected 'auto' or a boolean"),
        ("  - type: checkpoint", "  - type: checkpoint\n    priority: NORML", "did you mean 'NORMAL'?"),
        ("network:\n  type: mlp\n  hidden_units: [8]\n", "network:\n", "network: expected a mapping, got null"),
        ("runner:\n  max_epochs: 2\n  workflow: [[train, 1], [val, 1]]\n", "", "runner: missing required section `runner`"),
    ],
)
def test_schema_errors_are_located_and_explained(tmp_path: Path, old: str, new: str, expected: str) -> None:
    result = run("validate", str(variant(tmp_path, "p.yaml", old, new)))
    assert result.exit_code == 1
    errors = result.stdout.splitlines()
    assert len(errors) == 1, errors
    assert expected in errors[0]


# ------------------------------------------------------------------ validate: bad files


BOMB = "\n".join(
    ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    + [f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]" for i in range(1, 10)]
)


@pytest.mark.parametrize(
    "content, expected",
    [
        ("", ":1:1: error: the file is empty"),
        ("- version: 1\n", ":1:1: error: the top level of the file is a list"),
        ("version: 1\nrunner: [1, 2\n", "error: invalid YAML"),
        (GOOD + "name: again\n", ":23:1: error: name: duplicate key 'name' (first written at line 2)"),
        ("version: 1\nrunner:\n\tmax_epochs: 1\n", ":3:1: error: tab character"),
        (b"version: 1\nname: \xff\n", ":2:7: error: byte 0xff at offset 17 is not valid UTF-8"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "error: binary file (NUL byte at offset 8)"),
        (GOOD.replace("name: tiny", "name: !!python/object:os.system x"), ":2:7: error: name: the tag !!python/object:os.system is not allowed"),
        (GOOD.replace("name: tiny", "name: !env HOME"), ":2:7: error: name: the tag !env is not allowed"),
        (BOMB, "the document expands to more than 100000 values"),
        ("version: 1\nseed: &s [*s]\n", "an alias refers to a value that contains it"),
        ("a: " + "[" * 3000 + "]" * 3000, "nested more than 100 levels deep"),
        ("a: " + "x" * (1 << 20) + "\n", "error: the file is larger than 1 MiB"),
    ],
)
def test_bad_files_give_one_located_error(tmp_path: Path, content: str | bytes, expected: str) -> None:
    path = write(tmp_path, "bad.yaml", content)
    result = run("validate", str(path))
    assert result.exit_code == 1
    [line] = result.stdout.splitlines()
    assert line.startswith(f"{path}:") and expected in line, line
    assert "Traceback" not in result.output


def test_missing_path_and_directory_without_yaml(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = run("validate", str(tmp_path / "nope.yaml"), str(tmp_path / "empty"), str(tmp_path / "*.yml"))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'nope.yaml'}:1:1: error: no such file; check the path",
        f"{tmp_path / 'empty'}:1:1: error: no .yaml or .yml files in this directory",
        f"{tmp_path / '*.yml'}:1:1: error: the pattern matches no file",
    ]
    assert result.stderr.strip() == "3 files, 3 invalid, 3 errors"


def test_no_paths_is_a_usage_error() -> None:
    result = run("validate")
    assert result.exit_code == 2
    assert "Missing argument" in result.output


def test_directories_are_searched_recursively_and_globs_expanded(tmp_path: Path) -> None:
    good(tmp_path, "a.yaml")
    good(tmp_path, "sub/b.yml")
    variant(tmp_path, "sub/deeper/c.yaml", "version: 1", "version: 3")
    write(tmp_path, ".hidden/d.yaml", "not: [valid")
    write(tmp_path, "sub/notes.txt", "not yaml")
    result = run("validate", str(tmp_path), str(tmp_path / "a.yaml"))
    assert result.exit_code == 1
    assert result.stderr.strip() == "3 files, 1 invalid, 1 error"
    assert "c.yaml:1:10: error: version: unsupported version 3" in result.stdout
    result = run("validate", str(tmp_path / "**" / "*.yml"))
    assert result.exit_code == 0 and result.stderr.strip().splitlines()[0] == "1 file, 0 invalid, 0 errors"


def test_summary_counts_files_invalid_and_errors(tmp_path: Path) -> None:
    good(tmp_path, "ok.yaml")
    variant(tmp_path, "one.yaml", "batch_size: 8", "batch_size: 0")
    write(tmp_path, "four.yaml", GOOD.replace("name: tiny", "nme: tiny").replace("version: 1", "version: 9")
          .replace("batch_size: 8", "batch_size: x").replace("type: mlp", "type: mpl"))
    result = run("validate", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr.strip() == "3 files, 2 invalid, 5 errors"
    assert len(result.stdout.splitlines()) == 5


def test_a_base_files_line_printed_once_for_two_files_is_counted_once(tmp_path: Path) -> None:
    """Trial B16: two files extending one base with a bad line printed it once and counted it twice."""
    variant(tmp_path, "base.yaml", "batch_size: 8", "batch_size: 0")
    for name in ("a.yaml", "b.yaml"):
        write(tmp_path, name, f"extends: base.yaml\nname: {name[0]}\n")
    result = run("validate", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"))
    assert result.exit_code == 1 and len(result.stdout.splitlines()) == 1, result.stdout
    assert result.stderr.strip() == "2 files, 2 invalid, 1 error", result.stderr


def test_the_count_follows_every_printed_line_when_both_streams_share_a_pipe(tmp_path: Path) -> None:
    """Trial A16: `validate ... 2>&1` glued the count (stderr) to a half-written line of stdout, which a
    pipe holds back in blocks: `... anchors 16-48 px1 file, 0 invalid`. The lines are flushed first."""
    import subprocess
    import sys

    for index in range(200):  # an error each: more stdout than a pipe buffer holds
        variant(tmp_path, f"f{index:03}.yaml", "batch_size: 8", "batch_size: 0")
    result = subprocess.run([sys.executable, "-m", "dsl", "validate", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=120)
    lines = result.stdout.splitlines()
    count = [line for line in lines if "200 files, 200 invalid" in line]
    assert len(count) == 1 and count[0] == "200 files, 200 invalid, 200 errors" == lines[-1], lines[-5:]


def test_format_json(tmp_path: Path) -> None:
    ok = good(tmp_path, "ok.yaml")
    bad = variant(tmp_path, "bad.yaml", "batch_size: 8", "batch_size: 0")
    result = run("validate", "--format", "json", str(ok), str(bad))
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["summary"] == {"files": 2, "invalid": 1, "errors": 1, "warnings": 0}
    assert [f["valid"] for f in report["files"]] == [True, False]
    assert report["files"][1]["diagnostics"] == [
        {
            "file": str(bad),
            "line": 8,
            "col": 15,
            "path": "inputter.batch_size",
            "message": "must be at least 1, got 0",
            "severity": "error",
        }
    ]


def test_format_github(tmp_path: Path) -> None:
    bad = variant(tmp_path, "bad.yaml", "batch_size: 8", "batch_size: 0")
    result = run("validate", "--format", "github", str(bad))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"::error file={bad},line=8,col=15::inputter.batch_size: must be at least 1, got 0"
    ]


# ------------------------------------------------------------------ validate: semantic checks


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("max_epochs: 2", "max_epochs: 2\n  max_iters: 10",
         ":22:3: error: runner.max_iters: give only one of runner.max_epochs"),
        ("max_epochs: 2", "max_epochs: null", "runner: give the length of training"),
        ("[[train, 1], [val, 1]]", "[[val, 1]]", "runner.workflow: the workflow has no train phase"),
        ("hidden_units: [8]", "hidden_units: [8]\n  num_classes: 5",
         ":12:16: error: network.num_classes: network.num_classes is 5 but inputter.num_classes is 3 "),
        ("  - type: progress", "  - type: progress\n  - type: checkpoint",
         ":20:11: error: callbacks[2].type: the checkpoint callback may appear only once; it is also callbacks[0].type"),
        ("val: 16}", "val: 0}", "runner.workflow[1]: the workflow has a val phase, but inputter.num_examples.val is 0"),
        ("    momentum: 0.9", "    momentum: 0.9\n  lr_schedule: {type: piecewise, boundaries: [5, 5], values: [1, 0.1, 0.01]}",
         "modeler.lr_schedule.boundaries[1]: boundaries must be strictly increasing: 5 follows 5"),
        ("    momentum: 0.9", "    momentum: 0.9\n  lr_schedule: {type: piecewise, boundaries: [2, 5], values: [1, 0.1]}",
         "modeler.lr_schedule.values: a piecewise schedule needs one value per interval: 2 boundaries make 3"),
        ("max_epochs: 2", "max_epochs: 2\n  elastic: {min_workers: 3, max_workers: 2}",
         "runner.elastic.max_workers: max_workers 2 is below min_workers 3"),
        ("max_epochs: 2", "max_epochs: 2\n  backend: ps\n  elastic: {}",
         "runner.elastic: runner.elastic needs Horovod, but runner.backend is ps"),
        ("max_epochs: 2", "max_epochs: 2\n  backend: ps\n  precision: mixed_float16",
         ":23:14: error: runner.precision: mixed_float16 needs loss scaling, which TensorFlow does not support"),
        ("max_epochs: 2", "max_epochs: 2\n  backend: local\n  horovod: {sync_batch_norm: true}",
         ":23:30: error: runner.horovod.sync_batch_norm: sync_batch_norm synchronises Horovod ranks, but "
         "runner.backend is local ("),
    ],
)
def test_semantic_checks(tmp_path: Path, old: str, new: str, expected: str) -> None:
    result = run("validate", str(variant(tmp_path, "p.yaml", old, new)))
    assert result.exit_code == 1, result.output
    errors = result.stdout.splitlines()
    assert len(errors) == 1 and expected in errors[0], errors


def test_image_shape_must_agree(tmp_path: Path) -> None:
    networks = [t for t in registry.types("network") if "image_shape" in registry.lookup("network", t).params]
    if not networks:
        pytest.skip("no network type takes image_shape")
    network = networks[0]
    text = GOOD.replace("type: mlp\n  hidden_units: [8]", f"type: {network}\n  image_shape: [16, 16, 3]")
    result = run("validate", str(write(tmp_path, "p.yaml", text)))
    assert "network.image_shape is [16, 16, 3] but inputter.image_shape is [8, 8, 3]" in result.stdout


def test_val_phase_needs_val_data(tmp_path: Path) -> None:
    require("inputter", "image_classification_csv")
    text = GOOD.replace(
        "  type: synthetic\n  num_examples: {train: 32, val: 16}\n",
        "  type: image_classification_csv\n  train: train.csv\n",
    )
    result = run("validate", str(write(tmp_path, "p.yaml", text)))
    assert result.exit_code == 1
    [line] = result.stdout.splitlines()
    assert "runner.workflow[1]: the workflow has a val phase, but inputter.val is null (the default)" in line
    assert result.exit_code == 1
    fixed = text.replace("train: train.csv", "train: train.csv\n  val: val.csv")
    assert run("validate", str(write(tmp_path, "q.yaml", fixed))).exit_code == 0


# ------------------------------------------------------------------ extends, --set, ${ENV}


def test_extends_chain(tmp_path: Path) -> None:
    good(tmp_path, "bases/base.yaml")
    write(tmp_path, "bases/middle.yaml", "extends: base.yaml\nname: middle\nrunner:\n  max_epochs: 1\n")
    top = write(tmp_path, "top.yaml", "extends: bases/middle.yaml\nnetwork:\n  hidden_units: [2]\n")
    result = run("show", str(top))
    assert result.exit_code == 0, result.output
    resolved = yaml.safe_load(result.stdout)
    # A name is not inherited: the top file is named after itself (runs/top), not after middle.yaml
    # (a trial's variant without a name resumed another variant's checkpoint in runs/<base's name>).
    assert resolved["name"] == "top" and resolved["runner"]["max_epochs"] == 1
    assert resolved["network"]["hidden_units"] == [2] and "extends" not in resolved
    # An error in a base is reported in the base file, where it can be fixed.
    write(tmp_path, "bases/middle.yaml", "extends: base.yaml\nrunner:\n  max_epochs: zero\n")
    result = run("validate", str(top))
    assert result.stdout.startswith(f"{tmp_path / 'bases' / 'middle.yaml'}:3:15: error: runner.max_epochs: expected an integer")


def test_extends_cycle_and_missing(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "extends: b.yaml\n")
    write(tmp_path, "b.yaml", "extends: [a.yaml, gone.yaml]\n")
    result = run("validate", str(tmp_path / "a.yaml"))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any(f"b.yaml:1:11: error: extends[0]: extends cycle: {tmp_path / 'a.yaml'} → " in line for line in lines)
    assert any("extends[1]: base file 'gone.yaml' not found" in line for line in lines)
    assert len(lines) == 2  # no "missing section" noise from the part that could not be merged


def test_set_good_paths_apply_to_every_file(tmp_path: Path) -> None:
    good(tmp_path, "a.yaml")
    variant(tmp_path, "b.yaml", "max_epochs: 2", "max_epochs: 0")
    result = run("validate", str(tmp_path), "--set", "runner.max_epochs=null", "--set", "runner.max_iters=5")
    assert result.exit_code == 0, result.output
    result = run("show", str(tmp_path / "a.yaml"), "--set", "callbacks[1].priority=LOW", "--set", "inputter.cache=true")
    resolved = yaml.safe_load(result.stdout)
    assert resolved["callbacks"][1]["priority"] == "LOW" and resolved["inputter"]["cache"] is True


def test_set_bad_path_with_suggestion(tmp_path: Path) -> None:
    result = run("validate", str(good(tmp_path)), "--set", "runner.max_epochs=1", "--set", "runner.max_iter=10")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "<--set>:2:8: error: runner.max_iter: no such key: runner has no 'max_iter'; did you mean 'max_iters'?"
    ]


def test_set_bad_value_is_located_in_the_override(tmp_path: Path) -> None:
    result = run("validate", str(good(tmp_path)), "--set", "inputter.batch_size=-1")
    assert result.stdout.splitlines() == ["<--set>:1:21: error: inputter.batch_size: must be at least 1, got -1"]


def test_env_set_unset_and_default(tmp_path: Path) -> None:
    path = variant(tmp_path, "p.yaml", "max_epochs: 2", "max_epochs: ${EPOCHS:-3}\n  model_dir: ${OUT}/runs")
    result = run("show", str(path), env={"OUT": "/data", "EPOCHS": None})
    assert result.exit_code == 0, result.output
    runner = yaml.safe_load(result.stdout)["runner"]
    assert runner["max_epochs"] == 3 and runner["model_dir"] == "/data/runs"
    assert yaml.safe_load(run("show", str(path), env={"OUT": "/o", "EPOCHS": "7"}).stdout)["runner"]["max_epochs"] == 7
    result = run("validate", str(path), env={"OUT": None})
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{path}:22:14: error: runner.model_dir: environment variable OUT is not set; set it, or give a default: ${{OUT:-value}}"
    ]


# ------------------------------------------------------------------ show, schema, list


def test_show_prints_the_resolved_pipeline(tmp_path: Path) -> None:
    result = run("show", str(good(tmp_path)))
    assert result.exit_code == 0, result.output
    resolved = yaml.safe_load(result.stdout)
    assert resolved["runner"]["model_dir"] == "runs/tiny"
    assert resolved["augmenter"] == {"type": "none"} or resolved["augmenter"]["type"] == "none"
    assert resolved["callbacks"][0]["max_to_keep"] >= 1  # a default of a list item


def test_show_errors_exit_1(tmp_path: Path) -> None:
    result = run("show", str(variant(tmp_path, "p.yaml", "version: 1", "version: 2")))
    assert result.exit_code == 1
    assert "unsupported version 2" in result.stderr and result.stdout == ""


def test_schema_command(tmp_path: Path) -> None:
    result = run("schema")
    assert result.exit_code == 0 and result.stdout == schema_text()
    out = tmp_path / "schema.json"
    assert run("schema", "--output", str(out)).exit_code == 0
    assert out.read_text(encoding="utf-8") == schema_text()


def test_list_command() -> None:
    result = run("list", "networks")
    assert result.exit_code == 0
    assert "  mlp - " in result.stdout and "hidden_units: list of integer >= 1 = [128]" in result.stdout
    assert "inputter:" not in result.stdout
    everything = run("list").stdout
    for kind in ("Top level:", "runner:", "inputter:", "network:", "modeler:", "callbacks (a list of):"):
        assert kind in everything
    result = run("list", "netwrk")
    assert result.exit_code == 2 and "did you mean 'network'?" in result.output
    assert run("list", "--markdown").stdout == render_markdown()
    # The parameter every callback takes is described once, not once per callback.
    callbacks = run("list", "callbacks").stdout
    assert callbacks.count("priority:") == 1 and callbacks.index("every type also takes:") < callbacks.index("  checkpoint -")


# ------------------------------------------------------------------ former callback names

OLD_NAMES = {"eval_basic": "val_basic", "eval_loss": "val_loss", "eval_accuracy": "val_accuracy",
             "eval_summary": "val_summary", "eval_speed": "val_speed"}


def old_pipeline(tmp_path: Path) -> Path:
    listed = "".join(f"  - type: {old}\n" for old in OLD_NAMES)
    return variant(tmp_path, "old.yaml", "  - type: progress\n", "  - type: progress\n" + listed)


def test_former_callback_names_validate_with_a_located_warning_naming_the_new_one(tmp_path: Path) -> None:
    path = old_pipeline(tmp_path)
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{path}:{20 + index}:11: warning: callbacks[{2 + index}].type: callback type {old!r} is now called "
        f"{new!r}; the old name still works, but `dslrun migrate {path}` rewrites it"
        for index, (old, new) in enumerate(OLD_NAMES.items())
    ]
    assert result.stderr.strip().splitlines()[0] == "1 file, 0 invalid, 0 errors, 5 warnings"


def test_former_callback_names_resolve_to_the_new_ones(tmp_path: Path) -> None:
    result = run("show", str(old_pipeline(tmp_path)))
    assert result.exit_code == 0
    types = [c["type"] for c in yaml.safe_load(result.stdout)["callbacks"]]
    assert types == ["checkpoint", "progress", *OLD_NAMES.values()]
    assert result.stderr.count("warning: callbacks[") == 5


def test_a_run_of_former_callback_names_warns_and_builds_the_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `dslrun run` hands the engine: the new names, after the same located warnings."""
    import sys
    import types

    from dsl.language.errors import DslError

    def build_runner(pipeline: Pipeline, **_: object) -> None:
        raise DslError("engine got " + ", ".join(c.type for c in pipeline.callbacks))

    monkeypatch.setitem(sys.modules, "dsl.commands._training", types.SimpleNamespace(build_runner=build_runner))
    result = run("run", str(old_pipeline(tmp_path)))
    assert result.stderr.count("is now called") == 5
    assert result.stderr.splitlines()[-1] == "dslrun: error: engine got checkpoint, progress, " + ", ".join(OLD_NAMES.values())


def test_migrate_rewrites_only_the_former_names_and_keeps_the_rest_as_written(tmp_path: Path) -> None:
    path = old_pipeline(tmp_path)
    # CRLF line ends, a comment on a renamed line, a quoted and a flow-style former name.
    original = (path.read_text(encoding="utf-8").replace("  - type: eval_loss\n", '  - type: "eval_loss"   # keep me\n')
                .replace("  - type: eval_speed\n", "  - {type: eval_speed, priority: 30}\n").replace("\n", "\r\n"))
    path.write_bytes(original.encode("utf-8"))
    path.chmod(0o640)
    before = run("show", str(path)).stdout

    check = run("migrate", "--check", str(path))
    assert check.exit_code == 1
    assert check.stdout.splitlines() == [
        f"{path}:{20 + index}:{12 if old == 'eval_speed' else 11}: would rename callback type {old!r} to {new!r}"
        for index, (old, new) in enumerate(OLD_NAMES.items())]
    assert check.stderr.strip() == "1 file to migrate: dslrun migrate rewrites them"
    assert path.read_bytes() == original.encode("utf-8")

    done = run("migrate", str(tmp_path))  # a directory, as validate takes it
    assert done.exit_code == 0 and done.stderr.strip() == "1 file migrated", done.output
    expected = original
    for old, new in OLD_NAMES.items():
        expected = expected.replace(f"type: {old}", f"type: {new}").replace(f'type: "{old}"', f'type: "{new}"')
    assert path.read_bytes() == expected.encode("utf-8") and expected != original
    assert path.stat().st_mode & 0o777 == 0o640
    assert run("show", str(path)).stdout == before  # the same pipeline
    assert run("validate", str(path)).stdout == ""  # no warning left
    again = run("migrate", "--check", str(path))
    assert again.exit_code == 0 and again.stderr.strip() == "every file uses the current names"


def test_migrate_leaves_a_broken_file_alone_with_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("version: 1\ncallbacks: [\n", encoding="utf-8")
    result = run("migrate", str(path), str(tmp_path / "missing.yaml"))
    assert result.exit_code == 1
    assert [line.split(": error: ")[0] for line in result.stderr.splitlines()[:2]] == [f"{path}:3:1",
                                                                                      f"{tmp_path / 'missing.yaml'}:1:1"]
    assert path.read_text(encoding="utf-8") == "version: 1\ncallbacks: [\n"


def test_registry_finds_a_callback_by_its_former_name() -> None:
    for old, new in OLD_NAMES.items():
        assert registry.renamed("callback", old) == new
        assert registry.lookup("callback", old) is registry.lookup("callback", new)
    assert "eval_basic" not in registry.types("callback") and registry.renamed("callback", "val_basic") is None
