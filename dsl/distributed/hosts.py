"""Reaching other hosts over ssh, for `dslrun doctor --hosts` and `dslrun launch --hosts`.

The options mirror horovodrun's (`-H/--hosts`, `-p/--ssh-port`, `-i/--ssh-identity-file`,
`--network-interfaces`), plus `--ssh-config` (ssh's `-F`) and `--ssh-connect-timeout`.
Without them ssh reads the user's own configuration (~/.ssh/config, known_hosts, agent), as
horovodrun and mpirun do. ssh always runs with `BatchMode=yes`: a host that would ask for a
password or a host-key confirmation fails at once with ssh's own message, instead of hanging.

A remote command is run through the remote login shell, so every word is quoted here.
Nothing in this module imports TensorFlow.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from dsl.language.errors import DslError

# A host as ssh takes it: [user@]name, where name is a DNS name, an ssh config alias or an
# address. A leading "-" would be read by ssh as an option, so it is refused.
_HOST = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9_.:\[\]%-]+$")
_SLOTS = re.compile(r"^(?P<host>.+?):(?P<slots>[0-9]+)$")
SSH_FAILED = 255  # ssh's own exit status when it could not run the remote command


class HostError(DslError):
    """A problem with one host, reported as `<host>: <check>: <message>`."""

    def __init__(self, host: str, message: str, check: str = "reachable") -> None:
        super().__init__(f"{host}: {check}: {message}")
        self.host = host
        self.message = message
        self.check = check


def parse_hosts(text: str, option: str = "--hosts", allow_slots: bool = False) -> list[str]:
    """The host names of `a,b,c` (at least two, no repeats); `a:2` slot counts when allowed.

    Raises click.BadParameter with the fix, so click prints it as a usage error (exit 2).
    """
    names: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise click.BadParameter(f"{text!r} has an empty host name; expected hostA,hostB", param_hint=option)
        match = _SLOTS.match(item)
        if match and not item.startswith("["):
            if not allow_slots:
                raise click.BadParameter(
                    f"{item!r}: slot counts (host:N) are horovodrun's; dslrun launch places the tasks itself, "
                    "so give the host names alone", param_hint=option)
            item = match["host"]
        if item.startswith("-") or not _HOST.match(item):
            raise click.BadParameter(f"{item!r} is not a host name ([user@]name or address)", param_hint=option)
        if item in names:
            raise click.BadParameter(f"{item!r} is named twice", param_hint=option)
        names.append(item)
    if len(names) < 2:
        raise click.BadParameter(
            f"{text!r} names one host; a check or a cluster across hosts needs at least two "
            "(on one machine, leave out --hosts)", param_hint=option)
    return names


@dataclass(frozen=True)
class Ssh:
    """How to reach the hosts: the ssh client's options, shared by every connection."""

    port: int | None = None
    identity_file: str | None = None
    config_file: str | None = None
    connect_timeout: float = 10.0

    def argv(self, host: str, remote: Sequence[str]) -> list[str]:
        """The local command that runs `remote` (argv words) on `host`."""
        options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, round(self.connect_timeout))}",
                   "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "-T"]
        if self.config_file:
            options = ["-F", self.config_file, *options]
        if self.port:
            options += ["-p", str(self.port)]
        if self.identity_file:
            options += ["-i", self.identity_file, "-o", "IdentitiesOnly=yes"]
        return ["ssh", *options, host, "--", shell_join(remote)]

    def run(self, host: str, remote: Sequence[str], stdin: str = "", timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run `remote` on `host` and wait; HostError when ssh itself fails or time runs out."""
        try:
            feed: dict[str, Any] = {"input": stdin} if stdin else {"stdin": subprocess.DEVNULL}
            result = subprocess.run(self.argv(host, remote), capture_output=True, text=True, timeout=timeout, **feed)
        except FileNotFoundError:
            raise HostError(host, "ssh is not installed here (apt-get install openssh-client)") from None
        except subprocess.TimeoutExpired:
            raise HostError(host, f"no answer within {timeout:g} s over ssh") from None
        if result.returncode == SSH_FAILED:
            raise HostError(host, f"unreachable over ssh: {ssh_error(result.stderr)}")
        return result


def shell_join(words: Sequence[str]) -> str:
    """`words` as one command line for a POSIX shell, each word quoted."""
    return " ".join(shlex.quote(word) for word in words)


def ssh_error(stderr: str) -> str:
    """ssh's own message, with the fix for the usual causes."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    message = lines[-1] if lines else "ssh exited with status 255"
    hints = (
        ("Host key verification failed", "add the host's key to ~/.ssh/known_hosts (ssh-keyscan HOST >> ~/.ssh/known_hosts)"),
        ("Permission denied", "dslrun connects without a password: install a key (ssh-copy-id HOST, or --ssh-identity-file)"),
        ("Could not resolve hostname", "check the name, or add it to /etc/hosts or ~/.ssh/config"),
        ("Connection refused", "is sshd running there, on this port (--ssh-port)?"),
        ("timed out", "check the address and the firewall, or raise --ssh-connect-timeout"),
    )
    for needle, hint in hints:
        if needle in message:
            return f"{message} ({hint})"
    return message


def ssh_options(function):  # type: ignore[no-untyped-def]
    """The ssh options of `doctor --hosts` and `launch --hosts`, named as horovodrun names them."""
    decorators = [
        click.option("-p", "--ssh-port", type=click.IntRange(1, 65535), default=None,
                     help="SSH port on all the hosts (default: ssh's own, usually 22)."),
        click.option("-i", "--ssh-identity-file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Private key ssh uses for all the hosts."),
        click.option("--ssh-config", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="ssh configuration file to use instead of ~/.ssh/config (ssh -F)."),
        click.option("--ssh-connect-timeout", type=click.FloatRange(min=1), default=10.0, show_default=True,
                     help="Seconds to wait for each ssh connection."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


def make_ssh(ssh_port: int | None, ssh_identity_file: str | None, ssh_config: str | None,
             ssh_connect_timeout: float) -> Ssh:
    return Ssh(ssh_port, ssh_identity_file, ssh_config, ssh_connect_timeout)


def parse_interfaces(text: str | None) -> list[str]:
    """`--network-interfaces eth0,ib0` as a list (empty when not given)."""
    if not text:
        return []
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise click.BadParameter(f"{text!r} has an empty interface name", param_hint="--network-interfaces")
    return names
