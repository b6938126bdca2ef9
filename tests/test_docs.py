"""The front door: the README stays short and true, and the commands the docs show exist.

`make test` also builds the documentation site with warnings as errors (`make docs`: a broken
link or a page left out of the navigation fails); these tests hold what mkdocs cannot see.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from dsl.cli import main
from dsl.language.pipeline import check_pipeline

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "docs" / "getting-started.md", ROOT / "docs" / "distributed.md",
         *sorted((ROOT / "docs" / "tasks").glob("*.md"))]


def code_blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_the_readme_is_a_front_page() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


def test_every_link_of_the_readme_leads_to_a_file() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local and [link for link in local if not (ROOT / link).exists()] == []


def test_the_readme_pipeline_validates(tmp_path: Path) -> None:
    """The pipeline the README shows is a real one: it validates next to the shipped files."""
    (snippet,) = code_blocks(README, "yaml")
    path = tmp_path / "quickstart.yaml"
    path.write_text(snippet.replace("extends: cifar10.yaml", f"extends: {ROOT / 'pipelines' / 'cifar10.yaml'}"),
                    encoding="utf-8")
    resolved, diagnostics = check_pipeline(path)
    assert resolved is not None and diagnostics == [], [d.format_text() for d in diagnostics]


def shown_commands() -> list[tuple[str, list[str]]]:
    """(page, words) of every `dslrun ...` line in the shell blocks of the user-facing pages."""
    found = []
    for page in PAGES:
        for block in code_blocks(page, "sh"):
            for line in block.splitlines():
                words = shlex.split(line.split("#", 1)[0].replace("|", " "))
                while words and words[0] != "dslrun":
                    words.pop(0)  # a launcher in front (horovodrun -np 4, DATA_DIR=... )
                if words:
                    found.append((page.name, words[1:]))
    return found


@pytest.mark.parametrize("page, words", shown_commands(), ids=lambda value: " ".join(value) if isinstance(value, list) else value)
def test_every_command_the_docs_show_exists_with_its_options(page: str, words: list[str]) -> None:
    """Each `dslrun` line names a real command (a FILE alone means `run`) and only options it has."""
    command: click.Command = main
    context = click.Context(main)
    rest = [word.strip("[]") for word in words]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(context, rest[0])
        if sub is None:  # `dslrun FILE`: the default command
            sub = command.get_command(context, "run")
        else:
            rest = rest[1:]
        assert sub is not None, f"{page}: dslrun {' '.join(words)}"
        command = sub
    known = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]} | {"--help", "-h"}
    used = {word.split("=", 1)[0] for word in rest if word.startswith("-") and word != "-"}
    assert used <= known, f"{page}: dslrun {' '.join(words)}: {sorted(used - known)} are not options of it"
