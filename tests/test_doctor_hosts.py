"""`dslrun doctor --hosts`: the preflight across two real test hosts (network namespaces, real sshd).

One run on two good hosts passes; one run on a hostb broken three ways (its data folder
hidden, another dslrun version bound over dsl/__init__.py, the model_dir's parent hidden)
reports each problem on its own located line; one run over unreachable and half-installed
hosts reports each of them. The pure parts (host lists, comparisons) are tested directly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from testhosts import test_hosts  # noqa: F401 (the session fixture)

import dsl
from dsl.distributed.hosts import Ssh, parse_hosts, ssh_error
from dsl.distributed.preflight import compare_packages, data_items, public_addresses, shared_interfaces
from dsl.language.resolved import Component
from dsl.tasks.image_classification._host_files import csv_samples

from e2e_support import DSLRUN, ENV, dslrun, synthetic_data

REPO = Path(__file__).resolve().parents[1]

PIPELINE = """\
version: 1
name: tiny_hosts
inputter:
  type: image_classification_csv
  train: {data}/train.csv
  val: {data}/eval.csv
  num_classes: 4
  image_shape: [8, 8, 3]
  batch_size: 4
network: {{type: simple_cnn, filters: [4], dense_units: 8}}
modeler:
  type: image_classification
  optimizer: {{type: momentum, learning_rate: 0.05, momentum: 0.9}}
runner:
  model_dir: {run}
  max_epochs: 1
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pipeline whose data and run directory sit in separate folders (each can be hidden alone)."""
    root = tmp_path_factory.mktemp("doctor_hosts")
    data = synthetic_data(root / "data", num_train=16, num_val=8, image_size=8)
    (root / "shared").mkdir()
    path = root / "tiny_hosts.yaml"
    path.write_text(PIPELINE.format(data=data, run=root / "shared" / "run"))
    return path


def doctor(hosts, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`dslrun doctor ARGS` on the login node, where hosta and hostb resolve."""
    return subprocess.run(hosts.command([*DSLRUN, "doctor", *args]), capture_output=True, text=True,
                          env={**hosts.env, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=timeout)


def rows(stdout: str) -> dict[str, dict[str, str]]:
    lines = [line.split() for line in stdout.strip().splitlines()]
    header = lines[0]
    return {line[0]: dict(zip(header, line)) for line in lines[1:]}


def problem_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("dslrun doctor: ")]


# ------------------------------------------------------------------------------ real hosts
@pytest.mark.slow
@pytest.mark.multihost
def test_two_good_hosts_pass(test_hosts, job: Path) -> None:  # noqa: F811
    result = doctor(test_hosts, "--hosts", "hosta,hostb", "--network-interfaces", test_hosts.interface, str(job))
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result.stdout)
    assert set(table) == {"hosta", "hostb"}
    for row in table.values():
        expected = {"reachable": "yes", "versions": "same", "interface": test_hosts.interface, "data": "ok",
                    "model_dir": "shared", "ports": "ok"}
        assert {key: row[key] for key in expected} == expected, result.stdout
    assert problem_lines(result.stderr) == [], result.stderr
    assert "Traceback" not in result.stderr
    leftovers = list((job.parent / "shared").iterdir())
    assert leftovers == [], leftovers  # the model_dir token is removed, and model_dir is not created


@pytest.mark.slow
@pytest.mark.multihost
def test_a_public_address_on_the_job_interface_is_warned_about(test_hosts) -> None:  # noqa: F811
    """A warning, not a problem: the job can run, but its unauthenticated servers would face the internet."""
    hostb, public = test_hosts.hosts["hostb"], "11.0.0.7"  # globally routable, and only inside hostb's namespace
    added = hostb.run(["ip", "addr", "add", f"{public}/32", "dev", test_hosts.interface])
    assert added.returncode == 0, added.stderr
    try:
        result = doctor(test_hosts, "--hosts", "hosta,hostb", "--network-interfaces", test_hosts.interface)
    finally:
        hostb.run(["ip", "addr", "del", f"{public}/32", "dev", test_hosts.interface])
    assert result.returncode == 0, result.stdout + result.stderr
    assert problem_lines(result.stderr) == [
        f"dslrun doctor: warning: hostb: interface: {test_hosts.interface} has the public address {public}: the job's "
        "servers (TensorFlow's gRPC servers, Horovod's rendezvous, Gloo's and MPI's peer ports) take unauthenticated "
        "connections, and some listen on every interface; run the job on a private network or behind the firewall "
        "rules in docs/multihost.md (What a job exposes on the network)"], result.stderr


def test_public_addresses_are_the_globally_routable_ones() -> None:
    found = public_addresses({"eth0": ["10.1.2.3", "192.168.0.4", "172.16.0.1", "100.64.0.1", "fe80::1"],
                              "eth1": ["8.8.4.4", "2001:4860::1", "not-an-address"]})
    assert found == [("eth1", "8.8.4.4"), ("eth1", "2001:4860::1")]


@pytest.mark.slow
@pytest.mark.multihost
def test_a_host_broken_three_ways_gets_one_located_line_each(test_hosts, job: Path, tmp_path: Path) -> None:  # noqa: F811
    hostb = test_hosts.hosts["hostb"]
    other_version = tmp_path / "__init__.py"
    other_version.write_text((REPO / "dsl" / "__init__.py").read_text().replace('__version__ = "', '__version__ = "9.'))
    data = job.parent / "data"
    with hostb:  # every hide/bind below is undone on leaving
        hostb.hide(data)
        hostb.bind(other_version, REPO / "dsl" / "__init__.py")
        hostb.hide(job.parent / "shared")
        result = doctor(test_hosts, "--hosts", "hosta,hostb", str(job), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = problem_lines(result.stderr)
    assert f"dslrun doctor: hostb: data: cannot read {data}/train.csv (No such file or directory)" in lines, lines
    version = dsl.__version__
    assert f"dslrun doctor: hostb: versions: dslrun version 9.{version} on hostb, {version} here" in lines, lines
    shared = [line for line in lines if line.startswith("dslrun doctor: hostb: model_dir: ")]
    assert len(shared) == 1 and "is not on storage shared with hosta" in shared[0], lines
    assert not [line for line in lines if "hosta" in line.split(":")[1]], lines  # hosta is fine
    report = json.loads(result.stdout)
    hosts = {entry["host"]: entry for entry in report["hosts"]}
    assert hosts["hosta"]["problems"] == []
    assert {p["check"] for p in hosts["hostb"]["problems"]} == {"data", "versions", "model_dir"}
    assert hosts["hostb"]["model_dir"] == "unshared" and hosts["hostb"]["versions"] == "differ"
    assert report["problems"] == [line[len("dslrun doctor: "):] for line in lines]


@pytest.mark.slow
@pytest.mark.multihost
def test_unreachable_and_half_installed_hosts_are_each_named(test_hosts, tmp_path: Path) -> None:  # noqa: F811
    """An unknown name, a refused connection, and a host without this interpreter's path."""
    refused = test_hosts.login_address  # the login node's bridge address: no sshd listens there
    with test_hosts.hosts["hostb"] as hostb:
        hostb.hide(Path(sys.executable).parent)
        result = doctor(test_hosts, "--hosts", f"hosta,hostb,nosuchhost.invalid,{refused}", "--ssh-connect-timeout", "3")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = problem_lines(result.stderr)
    assert any(line.startswith("dslrun doctor: nosuchhost.invalid: reachable: unreachable over ssh: ")
               and "Could not resolve hostname" in line for line in lines), lines
    assert any(line.startswith(f"dslrun doctor: {refused}: reachable: unreachable over ssh: ")
               and "Connection refused" in line for line in lines), lines
    assert any(line.startswith(f"dslrun doctor: hostb: versions: {sys.executable} cannot run there (")
               and "No such file or directory" in line for line in lines), lines
    table = rows(result.stdout)
    assert table["nosuchhost.invalid"]["reachable"] == "no" and table["hostb"]["reachable"] == "yes"
    assert table["hosta"]["versions"] == "same"
    assert not [line for line in lines if line.startswith("dslrun doctor: hosta:")], lines


# ----------------------------------------------------------------------- bad command lines
@pytest.mark.parametrize(("args", "message"), [
    (["--hosts", "hosta"], "names one host"),
    (["--hosts", "hosta,hosta"], "'hosta' is named twice"),
    (["--hosts", "hosta,,hostb"], "empty host name"),
    (["--hosts", "hosta,-oProxyCommand=evil"], "is not a host name"),
    (["--hosts", "hosta,hostb", "--ports", "http"], "'http' is not a TCP port"),
    (["--hosts", "hosta,hostb", "--network-interfaces", "eth0,"], "empty interface name"),
    (["pipelines/cifar10.yaml"], "PIPELINE only make sense with --hosts"),
    (["--ports", "2222"], "--ports only make sense with --hosts"),
])
def test_bad_command_lines_are_refused_before_any_ssh(args: list[str], message: str) -> None:
    result = dslrun("doctor", *args, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_pipeline_that_does_not_validate_is_reported_located(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrunner:\n  max_epochs: -1\n")
    result = subprocess.run([*DSLRUN, "doctor", "--hosts", "hosta,hostb", str(bad)], capture_output=True,
                            text=True, env=ENV, timeout=60)
    assert result.returncode == 1
    assert f"{bad}:3:" in result.stderr and "Traceback" not in result.stderr


# -------------------------------------------------------------------------------- units
def test_host_lists_accept_horovodrun_slots_only_where_asked() -> None:
    assert parse_hosts("a:2,user@b:4", allow_slots=True) == ["a", "user@b"]
    with pytest.raises(click.BadParameter, match="slot counts"):
        parse_hosts("a:2,b")
    assert parse_hosts("10.0.0.1,10.0.0.2") == ["10.0.0.1", "10.0.0.2"]


def test_ssh_command_quotes_every_remote_word() -> None:
    argv = Ssh(port=2222, identity_file="/k", config_file="/c").argv("h", ["python", "-c", "print('a b')", "{}"])
    assert argv[:3] == ["ssh", "-F", "/c"] and "BatchMode=yes" in argv and argv[argv.index("-p"):][:2] == ["-p", "2222"]
    assert argv[-3:] == ["h", "--", "python -c 'print('\"'\"'a b'\"'\"')' '{}'"]
    assert "ssh-keyscan" in ssh_error("Host key verification failed.\n")


def test_versions_compare_paths_and_builds() -> None:
    mine = {"python": {"path": "/v/bin/python", "version": "3.11.7"},
            "horovod": {"version": "0.28.1", "path": "/v/hvd", "controllers": ["Gloo", "MPI"]},
            "mpirun": {"path": "/usr/bin/mpirun", "version": "4.1.4"}, "orted": {"path": "/usr/bin/orted"}}
    same = json.loads(json.dumps(mine))
    assert compare_packages(mine, same, "b") == []
    theirs = json.loads(json.dumps(mine))
    theirs["horovod"]["controllers"] = ["Gloo"]
    del theirs["mpirun"], theirs["orted"]
    assert compare_packages(mine, theirs, "b") == [
        "horovod controllers [Gloo] on b, [Gloo, MPI] here",
        "orted (Open MPI's daemon) /usr/bin/orted here, not found on b on the PATH of ssh commands",
    ]


def test_shared_interface_is_found_or_the_odd_host_is_named() -> None:
    found = {"a": {"eth0": ["10.0.0.1"], "ib0": ["10.1.0.1"]}, "b": {"eth0": ["10.0.0.2"]}}
    assert shared_interfaces(found) == (["eth0"], {})
    common, problems = shared_interfaces({"a": {"eth0": ["10.0.0.1"]}, "b": {"ens3": ["10.0.0.2"]}})
    assert common == [] and list(problems) == ["b"] and "ens3 10.0.0.2" in problems["b"]
    assert shared_interfaces(found, ["ib0"])[1] == {"b": "ib0 not up with an address here (usable here: eth0 10.0.0.2)"}


def test_data_items_name_the_sources_and_sample_csv_images(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text("path,label\n" + "".join(f"img/{i}.png,{i % 2}\n" for i in range(10)))
    inputter = Component.from_resolved({"type": "image_classification_csv", "train": "train.csv", "val": None,
                                        "test": ["t-*.csv"]})
    items = data_items(inputter, ["p.yaml"], str(tmp_path))
    assert items[:2] == [{"path": str(tmp_path / "p.yaml"), "kind": "file"},
                         {"path": str(tmp_path / "train.csv"), "kind": "file"}]
    assert items[2] == {"path": str(tmp_path / "t-*.csv"), "kind": "glob"}
    # What the inputter's type adds (its host_files): the first, middle and last image the CSV lists.
    assert [i["path"] for i in items[3:]] == [str(tmp_path / "img" / f"{i}.png") for i in (0, 5, 9)]
    assert csv_samples(str(tmp_path / "missing.csv")) == []
