"""Backends are plug-ins: one registered from a third-party module, with no edit of dslrun, gets
its settings into the schema, is refused by validate's rules exactly where it lacks a
capability (with today's located messages), and trains a pipeline through the `dslrun` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsl.language import backend_registry

from e2e_support import ENV

# A backend from outside dslrun: one process (it derives from the shared defaults), with its own
# settings section `runner.toy` and no capability beyond a single process's. The example plug-in package's backend (examples/plugins/, docs/extending.md) under the name `toy`,
# with its loss-scaling capability left to each test (LOSS_SCALING).
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugins" / "dslrun-example-backend" / "dslrun_example_backend.py"
TOY = (EXAMPLE.read_text(encoding="utf-8").replace("the example plug-in's single process", "a test plugin's single process")
       .replace("example", "toy").replace("loss_scaling=False", "loss_scaling=LOSS_SCALING"))

PIPELINE = """\
version: 1
inputter: {{type: synthetic, num_examples: {{train: 32}}, image_shape: [8, 8, 3], batch_size: 8}}
network: {{type: mlp, hidden_units: [8]}}
modeler: {{type: image_classification}}
runner:
  model_dir: {run}
  max_epochs: 1
  workflow: [[train, 1]]
  backend: toy
{extra}"""


@pytest.fixture()
def plugin_dir(tmp_path: Path) -> Path:
    """`toybackend` (no loss scaling) and `toyscaled` (loss scaling) on PYTHONPATH; the first installed
    as a package whose `dslrun.plugins` entry point names it."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "toybackend.py").write_text(TOY.replace("LOSS_SCALING", "False"))
    (root / "toyscaled.py").write_text(TOY.replace("LOSS_SCALING", "True"))
    info = root / "toybackend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toybackend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dslrun.plugins]\ntoy = toybackend\n")
    return root


def dslrun(args: list[str], plugin_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The `dslrun` console script (the module when the venv has none), with the plugin installed."""
    script = Path(sys.executable).with_name("dslrun")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "dsl"]
    env = {**ENV, "PYTHONPATH": str(plugin_dir)}
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=300, cwd=cwd)


def write(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(run=tmp_path / "run", extra=extra))
    return path


def test_validate_knows_a_plugin_backend_only_with_the_flag(tmp_path: Path, plugin_dir: Path) -> None:
    pipeline = write(tmp_path, "  toy: {greeting: hi}\n")
    result = dslrun(["validate", str(pipeline)], plugin_dir, tmp_path)
    assert result.returncode == 1 and f"{pipeline}:9:12: error: runner.backend: " in result.stdout, result.stdout
    assert "'toy'" in result.stdout and "Traceback" not in result.stdout + result.stderr
    result = dslrun(["validate", "--plugin", "toybackend", str(pipeline)], plugin_dir, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_plugin_backends_settings_are_in_the_schema(tmp_path: Path, plugin_dir: Path) -> None:
    result = dslrun(["schema", "--plugin", "toybackend"], plugin_dir, tmp_path)
    assert result.returncode == 0, result.stderr
    runner = json.loads(result.stdout)["$defs"]["runner"]["properties"]
    assert runner["backend"]["enum"] == ["auto", "local", "horovod", "collective", "ps", "toy"]
    assert "`toy` (a test plugin's single process), or `auto`" in runner["backend"]["description"]
    assert runner["toy"]["properties"]["greeting"]["default"] == "hello"


@pytest.mark.parametrize("extra, expected", [
    # The refusals of today's built-in backends, worded and located exactly as for `backend: local`.
    ("  elastic: {}\n", ":10:3: error: runner.elastic: runner.elastic needs Horovod, but runner.backend is toy "
     "({pipeline}:9); set runner.backend: horovod or auto, or remove runner.elastic"),
    ("  horovod: {sync_batch_norm: true}\n", ":10:30: error: runner.horovod.sync_batch_norm: sync_batch_norm "
     "synchronises Horovod ranks, but runner.backend is toy ({pipeline}:9), so it would have no effect; set "
     "runner.backend: horovod or auto, or remove it"),
    ("  collective: {communication: ring}\n", ":10:16: error: runner.collective.communication: runner.collective "
     "configures the collective backend, but runner.backend is toy ({pipeline}:9), so communication would have no "
     "effect; set runner.backend: collective (and start it with `dslrun launch --backend collective`), or remove them"),
    ("  precision: mixed_float16\n", ":10:14: error: runner.precision: mixed_float16 needs loss scaling, which the "
     "toy backend does not support (runner.backend is toy, {pipeline}:9); use mixed_bfloat16, or runner.backend: "
     "horovod or local"),
])
def test_validate_asks_a_plugin_backend_for_its_capabilities(tmp_path: Path, plugin_dir: Path, extra: str,
                                                             expected: str) -> None:
    pipeline = write(tmp_path, extra)
    result = dslrun(["validate", "--plugin", "toybackend", str(pipeline)], plugin_dir, tmp_path)
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert result.returncode == 1 and errors == [f"{pipeline}{expected.format(pipeline=pipeline)}"], result.stdout


def test_a_declared_capability_lifts_the_refusal(tmp_path: Path, plugin_dir: Path) -> None:
    pipeline = write(tmp_path, "  precision: mixed_float16\n")
    result = dslrun(["validate", "--plugin", "toyscaled", str(pipeline)], plugin_dir, tmp_path)
    assert result.returncode == 0, result.stdout


def test_a_plugin_may_not_take_a_built_in_backends_name(tmp_path: Path, plugin_dir: Path) -> None:
    (plugin_dir / "clash.py").write_text(
        "from dsl.language.backend_registry import register_backend\n"
        "register_backend('ps', summary='x', title='x', create=lambda params, environ: None)\n")
    result = dslrun(["validate", "--plugin", "clash", str(write(tmp_path))], plugin_dir, tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("dslrun: error: --plugin clash: backend 'ps' is registered twice"), result.stderr


def test_every_built_in_backend_is_a_registration() -> None:
    assert backend_registry.names() == ["local", "horovod", "collective", "ps"]
    assert [spec.name for spec in backend_registry.auto_order()] == ["horovod", "local"]
    assert backend_registry.resolve("auto", {}).name == "local"
    assert backend_registry.resolve("auto", {"OMPI_COMM_WORLD_SIZE": "2"}).name == "horovod"
    ps = backend_registry.lookup("ps")
    assert ps.can("asynchronous", {"ps": {"mode": "cluster"}})
    assert not ps.can("asynchronous", {"ps": {"mode": "central_storage"}})
    assert [spec.name for spec in backend_registry.with_capability("elastic")] == ["horovod"]
    # What an elastic horovodrun starts from when runner.elastic is null (backends.horovod).
    assert backend_registry.lookup("horovod").defaults("elastic") == {
        "min_workers": 1, "max_workers": None, "commit_every_n_steps": 20}


@pytest.mark.slow
def test_a_plugin_backend_trains_a_pipeline_through_the_cli(tmp_path: Path, plugin_dir: Path) -> None:
    """Installed (an entry point, no --plugin), the toy backend runs the shared loop with its settings."""
    pipeline = write(tmp_path, "  toy: {greeting: hi from the plugin}\n")
    result = dslrun(["run", str(pipeline)], plugin_dir, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "toy backend: hi from the plugin" in result.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["mode"], r["step"]) for r in records] == [("train", 4)]
    saved = (tmp_path / "run" / "pipeline.yaml").read_text()
    assert "backend: toy" in saved and "greeting: hi from the plugin" in saved


def backend_name_tests(root: Path) -> list[str]:
    """Comparisons of something called backend with a built-in backend's name, outside the
    backends' own files (their class modules, private helpers and registrations)."""
    import ast

    built_in = {"local", "horovod", "collective", "ps"}
    own = {f"{name}.py" for name in built_in} | {f"{name}_spec.py" for name in built_in}
    found = []
    for path in sorted([*(root / "dsl").rglob("*.py"), *(root / "backends").glob("*.py")]):
        if path.parent.name == "backends" and (path.name in own or path.name.startswith("_")):
            continue
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Compare):
                continue
            names = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            if not names & built_in:
                continue  # before the source segment, which splits the whole file again for each comparison
            segment = ast.get_source_segment(text, node) or ""
            if "backend" in segment.lower():
                found.append(f"{path.relative_to(root)}:{node.lineno}: {segment}")
    return found


def test_no_module_tests_a_backends_name() -> None:
    """select, launch, doctor, the checks and scaling ask the registry what a backend can do."""
    assert backend_name_tests(Path(__file__).resolve().parent.parent) == []


def test_the_name_finder_finds_a_name_test(tmp_path: Path) -> None:
    (tmp_path / "dsl").mkdir()
    (tmp_path / "backends").mkdir()
    (tmp_path / "dsl" / "rule.py").write_text('def f(runner):\n    return runner.get("backend") in ("local", "ps")\n')
    assert backend_name_tests(tmp_path) == ['dsl/rule.py:2: runner.get("backend") in ("local", "ps")']


def test_doctor_lists_an_installed_plugin_backend(tmp_path: Path, plugin_dir: Path) -> None:
    result = dslrun(["doctor", "--json"], plugin_dir, tmp_path)
    support = json.loads(result.stdout)["backends"]
    assert list(support) == ["local", "horovod", "collective", "ps", "toy"]
    assert support["toy"] is None  # its registration's doctor check finds nothing missing


def test_registrations_import_neither_tensorflow_nor_horovod() -> None:
    """`dslrun validate` reads every registration: they import their backend's code only in `create`."""
    code = ("import sys\nfrom dsl.language import backend_registry, schema\nbackend_registry.load_all()\nschema.schema_text()\n"
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'horovod', 'mpi4py', 'keras')"
            " or m in ('backends.horovod', 'backends.ps', 'backends.collective', 'backends.base'))\nprint(loaded)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr
