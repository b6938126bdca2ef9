"""`dslrun doctor`: what this environment can run, and what is wrong with it.

Reports TensorFlow, Keras, GPUs, what each backend's registration reports of the library it runs
on (its `stack`: Horovod's version, build, frameworks, controllers and tensor operations), the
MPI implementation, mpi4py, and which backends can run here and why not (each registration's
`doctor`). Exits 1 when the stack cannot train: no TensorFlow,
TensorFlow older than 2.16, or a tf.keras that is not Keras 2 (tf_keras) of the same release.

`dslrun doctor --hosts hostA,hostB [PIPELINE]` checks the hosts of a job instead, over ssh
(dsl.distributed.preflight): one table row per host, then one line per problem, exit 1 if any.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from typing import Any

import click

from dsl.commands._common import set_option
from dsl.commands._doctor_backends import backend_support, describe, strategies
from dsl.distributed.hosts import make_ssh, ssh_options
from dsl.language import backend_registry


def _version(module: str) -> str | None:
    try:
        return str(getattr(importlib.import_module(module), "__version__", "unknown"))
    except Exception:  # any import failure means "not usable"
        return None


def keras_of(tf: Any) -> str:
    """The version of the Keras that `tf.keras` is: tf_keras's with TF_USE_LEGACY_KERAS=1, else Keras 3's."""
    package = "tf_keras" if getattr(tf.keras, "__name__", "").startswith("tf_keras") else "keras"
    return _version(package) or "unknown"


def _mpi() -> str | None:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        return None
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return f"{mpirun} (version unknown)"
    return out.strip().splitlines()[0] if out.strip() else mpirun


def _major_minor(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def version_problems(tf_version: str, keras_version: str) -> list[str]:
    """A refusal for a stack dslrun does not run on: TF < 2.16, Keras 3, or a tf_keras of another release."""
    fix = "make install (pip install 'tensorflow==2.21.0' 'tf-keras==2.21.0')"
    if _major_minor(tf_version) < (2, 16):
        return [f"TensorFlow {tf_version}: dslrun runs on TensorFlow 2.21 with tf_keras; {fix}"]
    if keras_version.startswith("3"):
        return [f"TensorFlow {tf_version} / Keras {keras_version}: tf.keras is Keras 3; dslrun runs on Keras 2: "
                f"set TF_USE_LEGACY_KERAS=1 (dslrun sets it unless the environment says otherwise) and {fix}"]
    if _major_minor(keras_version) != _major_minor(tf_version):
        return [f"TensorFlow {tf_version} / tf_keras {keras_version}: tf-keras must be of TensorFlow's release; {fix}"]
    return []


def collect() -> tuple[dict[str, Any], list[str]]:
    """Facts about the stack, and the problems that stop it from training."""
    import dsl.engine  # noqa: F401  (before TensorFlow: its start-up lines filtered as for training)

    problems: list[str] = []
    tf_version = _version("tensorflow")
    facts: dict[str, Any] = {"python": sys.version.split()[0], "tensorflow": tf_version}
    if tf_version is None:
        problems.append("TensorFlow is not installed: make install (pip install 'dslrun[train]': tensorflow 2.21, tf-keras)")
    else:
        import tensorflow as tf

        keras_version = keras_of(tf)
        facts["keras"] = keras_version
        facts["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
        problems += version_problems(tf_version, str(keras_version))
        facts.update(strategies(tf))
    for spec in backend_registry.backends():
        if spec.stack is not None:
            facts[spec.stack.key] = spec.stack.collect()
    facts["mpi"] = _mpi()
    facts["mpi4py"] = _version("mpi4py")
    facts["backends"] = backend_support(facts)
    return facts, problems


@click.command("doctor")
@click.argument("pipeline", metavar="[PIPELINE]", required=False, type=click.Path(dir_okay=False))
@set_option
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON.")
@click.option("-H", "--hosts", default=None, metavar="HOSTA,HOSTB",
              help="Check these hosts over ssh instead of this machine (with PIPELINE: its data and model_dir too).")
@click.option("--network-interfaces", default=None, metavar="NICS",
              help="With --hosts: interfaces (comma-separated) that must be up with an address on every host.")
@click.option("--ports", default=None, metavar="PORTS",
              help="With --hosts: fixed TCP ports (comma-separated) the job uses, which must be free on every host.")
@ssh_options
def command(pipeline: str | None, overrides: tuple[str, ...], as_json: bool, hosts: str | None,
            network_interfaces: str | None, ports: str | None, **ssh: Any) -> None:
    """Check the training stack (TensorFlow, Keras, the backends' libraries, MPI, GPUs), or with --hosts the hosts of a job."""
    if hosts is not None:
        from dsl.commands._doctor_hosts import check

        sys.exit(check(pipeline, overrides, as_json, hosts, network_interfaces, ports, make_ssh(**ssh)))
    given = [name for name, value in (("PIPELINE", pipeline), ("--set", overrides), ("--network-interfaces",
             network_interfaces), ("--ports", ports), ("--ssh-port", ssh["ssh_port"]),
             ("--ssh-identity-file", ssh["ssh_identity_file"]), ("--ssh-config", ssh["ssh_config"])) if value]
    if given:
        raise click.UsageError(f"{', '.join(given)} only make sense with --hosts (dslrun doctor --hosts hostA,hostB PIPELINE)")
    facts, problems = collect()
    if as_json:
        import json

        click.echo(json.dumps({**facts, "problems": problems}, indent=2))
    else:
        click.echo(f"Python      {facts['python']}")
        click.echo(f"TensorFlow  {facts['tensorflow'] or 'not installed'}")
        if facts["tensorflow"]:
            click.echo(f"Keras       {facts['keras']}")
            click.echo(f"GPUs        {', '.join(facts['gpus']) or 'none (CPU only)'}")
        for spec in backend_registry.backends():
            for line in spec.stack.report(facts[spec.stack.key]) if spec.stack is not None else []:
                click.echo(line)
        click.echo(f"MPI         {facts['mpi'] or 'not found (apt-get install openmpi-bin libopenmpi-dev)'}")
        click.echo(f"mpi4py      {facts['mpi4py'] or 'not installed'}")
        click.echo("Backends    (runner.backend)")
        for line in describe(facts["backends"]):
            click.echo(line)
    for problem in problems:
        click.echo(f"dslrun: error: {problem}", err=True)
    sys.exit(1 if problems else 0)
