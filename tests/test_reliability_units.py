"""Reliability without training: the metrics file survives torn lines, plugins load only when
the user says so, and a pipeline can neither run code nor blow up the loader.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsl.engine.rundir import MetricsFile, atomic_write_bytes, atomic_write_text, read_jsonl, repair_torn_tail

from e2e_support import ENV

PLUGIN = '''\
"""A third-party component: a network type dslrun does not ship."""
from dsl.language.registry import register

MARKER = __import__("os").environ.get("PLUGIN_MARKER")
if MARKER:
    open(MARKER, "a").write("imported\\n")


@register("network", "plugin_linear", params={}, description="Flatten, then logits (a test plugin).")
def build(params, context):
    import tensorflow as tf
    inputs = tf.keras.Input(shape=context.image_shape)
    outputs = tf.keras.layers.Dense(context.num_classes)(tf.keras.layers.Flatten()(inputs))
    return tf.keras.Model(inputs, outputs)
'''

PIPELINE = """\
version: 1
inputter: {{type: synthetic, num_examples: {{train: 32}}, image_shape: [8, 8, 3], batch_size: 8}}
network: {{type: {network}}}
modeler: {{type: image_classification}}
runner: {{model_dir: {run}, max_epochs: 1, workflow: [[train, 1]]}}
"""


# ------------------------------------------------------------------------------------ metrics file
def test_torn_last_metrics_line_is_tolerated_then_repaired(tmp_path: Path) -> None:
    metrics = MetricsFile(tmp_path)
    metrics.write({"mode": "train", "step": 1})
    with open(metrics.path, "a") as handle:
        handle.write('{"mode": "train", "st')  # a crash in the middle of an append
    assert [r["step"] for r in MetricsFile(tmp_path).read()] == [1]
    resumed = MetricsFile(tmp_path)
    resumed.write({"mode": "train", "step": 2})
    lines = metrics.path.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


WRITER = """\
import sys
from pathlib import Path
from dsl.engine.rundir import MetricsFile
metrics = MetricsFile(Path(sys.argv[1]), sys.argv[2])
for step in range(int(sys.argv[4])):
    metrics.write({"mode": sys.argv[3], "step": step, sys.argv[3] + "_only": step})
"""


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_two_processes_writing_the_metrics_file_lose_no_record(tmp_path: Path, fmt: str) -> None:
    # The trainer and an `eval --watch` process write the same file; a CSV write rewrites it.
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), fmt, mode, "150"], env=ENV)
               for mode in ("train", "eval")]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    records = MetricsFile(tmp_path, fmt).read()
    for mode in ("train", "eval"):
        assert [int(r["step"]) for r in records if r["mode"] == mode] == list(range(150))
    if fmt == "csv":
        header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
        assert {"train_only", "eval_only"} <= set(header), header


def test_a_corrupt_line_in_the_middle_is_not_hidden() -> None:
    with pytest.raises(json.JSONDecodeError):
        read_jsonl('{"a": 1}\n{"a": \n{"a": 2}\n')


def test_repair_leaves_whole_files_alone(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    assert repair_torn_tail(path) is False
    path.write_text('{"a": 1}\n')
    assert repair_torn_tail(path) is False and path.read_text() == '{"a": 1}\n'
    path.write_text('{"a"')
    assert repair_torn_tail(path) is True and path.read_text() == ""


def test_atomic_write_keeps_the_old_text_when_the_write_fails(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    atomic_write_text(path, "old\n")

    # The temporary file exists when the write fails: it must go, and the old text must stay.
    with pytest.raises(TypeError):
        atomic_write_bytes(path, 12345)  # type: ignore[arg-type]
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pipeline.yaml"]  # no temporary file left


# ------------------------------------------------------------------------------------ plugins
@pytest.fixture()
def plugin_dir(tmp_path: Path) -> Path:
    """A module on PYTHONPATH that registers `plugin_linear`, and an installed-package record naming it."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "tinyplugin.py").write_text(PLUGIN)
    info = root / "tinyplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dslrun.plugins]\ntiny = tinyplugin\n")
    return root


def run_cli(args: list[str], plugin_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**ENV, "PYTHONPATH": str(plugin_dir), "PLUGIN_MARKER": str(tmp_path / "marker")}
    return subprocess.run([sys.executable, "-m", "dsl", *args], capture_output=True, text=True, env=env,
                          timeout=180, cwd=tmp_path)


def test_validate_and_show_know_a_plugin_only_with_the_flag(tmp_path: Path, plugin_dir: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(network="plugin_linear", run=tmp_path / "run"))
    for command in ("validate", "show"):
        result = run_cli([command, str(pipeline)], plugin_dir, tmp_path)
        assert result.returncode == 1 and "unknown network type 'plugin_linear'" in result.stdout + result.stderr
        assert not (tmp_path / "marker").exists(), f"{command} imported an installed plugin"
    for command in ("validate", "show"):
        result = run_cli([command, "--plugin", "tinyplugin", str(pipeline)], plugin_dir, tmp_path)
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "marker").read_text() == "imported\n" * 2


@pytest.mark.slow
def test_run_loads_installed_plugins(tmp_path: Path, plugin_dir: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(network="plugin_linear", run=tmp_path / "run"))
    result = run_cli([str(pipeline)], plugin_dir, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "marker").read_text() == "imported\n"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["mode"], r["step"]) for r in records] == [("train", 4)]


def test_a_bad_plugin_is_one_line_naming_it(tmp_path: Path, plugin_dir: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(network="mlp", run=tmp_path / "run"))
    (plugin_dir / "clash.py").write_text(
        "from dsl.language.registry import register\n"
        "@register('network', 'mlp', params={}, description='x')\ndef build(p, c):\n    pass\n")
    (plugin_dir / "broken.py").write_text("raise RuntimeError('boom')\n")
    for module, expected in (("not_a_module_xyz", "no module named 'not_a_module_xyz'"),
                             ("broken", "importing it failed: RuntimeError: boom"),
                             ("clash", "registered twice")):
        result = run_cli(["validate", "--plugin", module, str(pipeline)], plugin_dir, tmp_path)
        assert result.returncode == 1
        assert result.stderr.startswith(f"dslrun: error: --plugin {module}: ") and expected in result.stderr
        assert "Traceback" not in result.stderr


# ------------------------------------------------------------------------------------ security
def test_pipeline_names_are_never_imported(tmp_path: Path, plugin_dir: Path) -> None:
    """A `type` that looks like code is an unknown type, and the module it names is not imported."""
    from dsl.cli import main

    pipeline = tmp_path / "p.yaml"
    for network in ("tinyplugin", "tinyplugin.build", "os.system", "__import__('os')"):
        pipeline.write_text(PIPELINE.format(network=json.dumps(network), run=tmp_path / "run"))
        for command in ("validate", "show"):
            result = run_cli([command, str(pipeline)], plugin_dir, tmp_path)
            assert result.returncode == 1
            assert f"unknown network type {network!r}" in result.stdout + result.stderr
    assert not (tmp_path / "marker").exists()
    pipeline.write_text(PIPELINE.format(network="simple_cn", run=tmp_path / "run"))
    result = CliRunner().invoke(main, ["validate", str(pipeline)])
    assert result.exit_code == 1 and "did you mean 'simple_cnn'" in result.output


@pytest.mark.parametrize("text, expected", [
    ("version: 1\ninputter: !!python/object/apply:os.system ['touch {marker}']\n", "is not allowed"),
    ("version: 1\nname: !!python/name:os.system\n", "is not allowed"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
     "expands to more than"),
    ("name: '" + "x" * (1 << 20) + "'\n", "larger than"),
])
def test_unsafe_yaml_is_refused_from_the_cli(tmp_path: Path, text: str, expected: str) -> None:
    from dsl.cli import main

    marker = tmp_path / "pwned"
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(text.replace("{marker}", str(marker)))
    for command in ("validate", "show"):
        result = CliRunner().invoke(main, [command, str(pipeline)])
        assert result.exit_code == 1
        assert f"{pipeline}:" in result.output and expected in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not marker.exists()


def test_up_front_check_finds_images_cut_short(tmp_path: Path) -> None:
    import io

    from PIL import Image

    from dsl.inputters.files import header_problem

    for fmt, suffix in (("PNG", "png"), ("JPEG", "jpg")):
        buffer = io.BytesIO()
        Image.new("RGB", (16, 16), (10, 200, 30)).save(buffer, format=fmt)
        whole = buffer.getvalue()
        good, cut, padded = (tmp_path / f"{name}.{suffix}" for name in ("good", "cut", "padded"))
        good.write_bytes(whole)
        cut.write_bytes(whole[: len(whole) // 2])
        padded.write_bytes(whole + bytes(100))  # some writers pad after the end marker
        assert header_problem(str(good)) is None
        assert header_problem(str(padded)) is None
        assert header_problem(str(cut)).startswith("truncated"), fmt


def test_a_changed_pipeline_is_said_by_its_changed_keys() -> None:
    """Trial B10 was told "the pipeline differs" and had to diff the files to find its own edit."""
    from dsl.engine.rundir import changes

    old = "name: a\ncallbacks:\n- {type: init_checkpoint, path: runs/base}\nrunner: {max_epochs: 3}\n"
    assert changes(old, old.replace("runs/base", "runs/base/best")) == "callbacks[0].path: runs/base -> runs/base/best"
    several = old.replace("3}", "4, seed: 1}").replace("name: a", "name: b")
    assert changes(old, several, most=2) == "name: a -> b; runner.max_epochs: 3 -> 4, and 1 more"
    assert changes(old, old + "# a comment\n") == "in its layout only"
    assert changes(old, old.replace("- {type: init_checkpoint, path: runs/base}\n", "")).startswith("callbacks: ")
