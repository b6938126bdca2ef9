"""`dslrun doctor --hosts`: the command-line side of dsl.distributed.preflight (table, problem lines, JSON)."""

from __future__ import annotations

import json
import os

import click

from dsl.commands._common import pipeline_or_exit
from dsl.distributed.hosts import HostError, Ssh, parse_hosts, parse_interfaces


def check(pipeline: str | None, overrides: tuple[str, ...], as_json: bool, hosts_text: str,
          interfaces_text: str | None, ports_text: str | None, ssh: Ssh) -> int:
    """Run the preflight and print it; the exit status (1 when any host has a problem)."""
    from dsl.distributed import preflight

    hosts = parse_hosts(hosts_text, "--hosts", allow_slots=True)
    request = preflight.Request(hosts, ssh, interfaces=parse_interfaces(interfaces_text), ports=parse_ports(ports_text))
    if pipeline is not None:
        resolved = pipeline_or_exit(pipeline, overrides)
        request.files = preflight.data_items(resolved.inputter, preflight.pipeline_files(pipeline), request.cwd)
        request.model_dir = os.path.normpath(os.path.join(request.cwd, resolved.runner.model_dir))
    try:
        reference, reports = preflight.check_hosts(request)
    except HostError as exc:
        click.echo(f"dslrun doctor: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        click.echo("dslrun doctor: interrupted", err=True)
        return 130
    problems = [line for report in reports for line in report.lines()]
    warnings = [line for report in reports for line in report.warning_lines()]
    if as_json:
        click.echo(json.dumps({"reference": reference, "hosts": [r.as_json() for r in reports],
                               "problems": problems, "warnings": warnings}, indent=2))
    else:
        click.echo(preflight.format_table(reports))
    for line in problems + warnings:
        click.echo(f"dslrun doctor: {line}", err=True)
    return 1 if problems else 0


def parse_ports(text: str | None) -> list[int]:
    if not text:
        return []
    ports = []
    for word in text.split(","):
        word = word.strip()
        if not word.isdigit() or not 1 <= int(word) <= 65535:
            raise click.BadParameter(f"{word!r} is not a TCP port (1-65535)", param_hint="--ports")
        ports.append(int(word))
    return ports
