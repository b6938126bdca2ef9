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

from e2e_support import RUN_BY_PACKAGE_TEST

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]  # the user-facing pages: every one


def code_blocks(path: Path, language: str) -> list[str]:
    """The `language` blocks of a page, but those its plug-in package test runs."""
    text = path.read_text(encoding="utf-8")
    return [match.group(2) for match in re.finditer(rf"({re.escape(RUN_BY_PACKAGE_TEST)}\n)?```{language}\n(.*?)```",
                                                    text, flags=re.S) if not match.group(1)]


def included_only(snippet: str) -> bool:
    """A block that only includes a file (`--8<-- "path"`): the file is checked where it lives (a
    plug-in's pipeline by the test that installs the plug-in)."""
    return all(line.startswith("--8<--") for line in snippet.strip().splitlines())


def test_the_readme_is_a_front_page() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


def test_every_link_of_the_readme_leads_to_a_file() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local and [link for link in local if not (ROOT / link).exists()] == []



def yaml_snippets() -> list[tuple[str, str]]:
    """(page:line, text) of every YAML block of the README and the documentation pages."""
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"```yaml\n(.*?)```", text, flags=re.S):
            if included_only(match.group(1)):
                continue
            found.append((f"{page.relative_to(ROOT)}:{text[:match.start()].count(chr(10)) + 2}", match.group(1)))
    return found


@pytest.mark.parametrize("where, snippet", yaml_snippets(), ids=[where for where, _ in yaml_snippets()])
def test_every_pipeline_snippet_of_the_docs_validates(where: str, snippet: str, tmp_path: Path) -> None:
    """A whole pipeline validates as written (its `extends` found among the shipped ones); a
    fragment (a section or two) validates merged over the quick start, as a user would use it."""
    pipelines = ROOT / "pipelines"
    if re.search(r"^(version|extends):", snippet, flags=re.M):
        text = re.sub(r"^extends: (\S+)", lambda m: f"extends: {pipelines / m.group(1)}", snippet, flags=re.M)
    else:
        text = f"extends: {pipelines / 'quickstart.yaml'}\n{snippet}"
    path = tmp_path / "snippet.yaml"
    path.write_text(text, encoding="utf-8")
    resolved, diagnostics = check_pipeline(path)
    errors = [d.format_text() for d in diagnostics if d.severity == "error"]
    assert resolved is not None and errors == [], f"{where}: {errors}"


def shown_commands() -> list[tuple[str, list[str]]]:
    """(page, words) of every `dslrun ...` command in the shell blocks of the README and the docs."""
    found = []
    for page in PAGES:
        for block in code_blocks(page, "sh"):
            pending = ""
            for line in block.replace("\\\n", " ").splitlines():  # continued lines joined
                pending += line.replace("|", " ") + "\n"
                try:
                    words = shlex.split(pending, comments=True)
                except ValueError:
                    continue  # a quoted value that goes on over the next line
                pending = ""
                while words and words[0] != "dslrun":
                    words.pop(0)  # a launcher in front (horovodrun -np 4, DATA_DIR=... )
                if words:
                    found.append((str(page.relative_to(ROOT)), words[1:]))
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
    known = {opt for param in command.get_params(context) for opt in [*param.opts, *param.secondary_opts]}
    used = {word.split("=", 1)[0] for word in rest if word.startswith("-") and word != "-"}
    assert used <= known, f"{page}: dslrun {' '.join(words)}: {sorted(used - known)} are not options of it"


def pins() -> dict[str, str]:
    """The versions pyproject.toml and the Makefile pin, by package."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = {}
    for requirement in project["optional-dependencies"]["train"]:
        name, _, version = requirement.split(";")[0].partition("==")
        if version:
            found[name.strip()] = version.split()[0].strip()
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for name, variable in (("horovod", "HOROVOD_VERSION"), ("mpi4py", "MPI4PY_VERSION")):
        match = re.search(rf"^{variable}\s*:=\s*(\S+)", makefile, flags=re.M)
        assert match, variable
        found[name] = match.group(1)
    return found


def test_the_stack_the_docs_name_is_the_one_installed() -> None:
    """The supported-stack table says the versions pyproject and the Makefile pin, and no page
    says dslrun pins (or requires, or runs on) another TensorFlow: the docs once said 2.15.1 on
    one page and 2.21 on another."""
    pinned = pins()
    stack = (ROOT / "docs" / "stack.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line.split("|")[2] for line in stack.splitlines() if line.startswith("| ")}
    assert pinned["tensorflow"] in rows["TensorFlow"] and pinned["tf-keras"] in rows["Keras"]
    assert pinned["horovod"] in rows["Horovod"] and pinned["mpi4py"] in rows["MPI"]
    claims = []
    for page in PAGES:
        if page.name.startswith("benchmarks"):
            continue  # measurements of other stacks, dated
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"(pins|pinned|requires|runs on|installs)\W+(?:\w+\W+){0,3}?TensorFlow (\d+\.\d+(?:\.\d+)?)",
                                 text):
            if not pinned["tensorflow"].startswith(match.group(2)):
                claims.append(f"{page.relative_to(ROOT)}: {match.group(0)}")
    assert claims == []
