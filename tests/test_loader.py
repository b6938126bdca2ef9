"""The YAML loader: plain values with positions, and a clear located error for every bad file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dsl.language.loader import (
    MAX_BYTES,
    MAX_VALUES,
    LoadError,
    _Builder,
    _Expansion,
    load_file,
    parse_text,
)

ROOT = Path(__file__).resolve().parents[1]
MERGES = "base: &b {x: 1, y: {z: 2}}\nother: &o {w: 0, x: 9}\nc:\n  <<: [*b, *o]\n  y: 3\nd: *b\ne: {<<: *o, v: [*b, *b]}\n"


def write(tmp_path: Path, text: str | bytes, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(LoadError) as info:
        load_file(path)
    assert len(info.value.diagnostics) == 1
    return info.value.diagnostics[0].format_text()


def test_values_and_positions_of_values_and_keys() -> None:
    doc = parse_text("a: 1\nb:\n  c: [1, 2.5]\n  d: {x: y}\n", "f.yaml")
    assert doc.value == {"a": 1, "b": {"c": [1, 2.5], "d": {"x": "y"}}}
    origin = doc.sources.get(("b", "c"))
    assert (origin.key.line, origin.key.col) == (3, 3)
    assert (origin.value.line, origin.value.col) == (3, 6)
    item = doc.sources.get(("b", "c", 1))
    assert (item.value.line, item.value.col, item.key) == (3, 10, None)
    # A path that no file wrote points at the key of the nearest parent that exists.
    missing = doc.sources.locate(("b", "d", "nope"))
    assert (missing.line, missing.col) == (4, 3)


def test_core_scalars_and_text_kept_as_written() -> None:
    doc = parse_text("i: 0x10\nf: 1e3\ng: 1.5e-4\nb: yes\nn: ~\nday: 2024-01-01\non: off\ns: '12'\n", "f.yaml")
    assert doc.value == {"i": 16, "f": 1000.0, "g": 1.5e-4, "b": True, "n": None, "day": "2024-01-01", "on": False, "s": "12"}
    assert "on" in doc.value  # keys are the text written, not YAML 1.1 booleans


def test_duplicate_keys_name_both_lines() -> None:
    doc = parse_text("a: 1\nb: 2\na: 3\n", "f.yaml")
    assert doc.value["a"] == 1
    [diagnostic] = doc.diagnostics
    assert diagnostic.format_text() == "f.yaml:3:1: error: a: duplicate key 'a' (first written at line 1)"


@pytest.mark.parametrize(
    "text, tag",
    [
        ("a: !!python/object:os.system ls\n", "!!python/object:os.system"),
        ("a: !!python/name:os.system ''\n", "!!python/name:os.system"),
        ("a: !custom x\n", "!custom"),
        ("a: !!binary aGVsbG8=\n", "!!binary"),
        ("a: !!set {x: null}\n", "!!set"),
    ],
)
def test_non_standard_tags_are_errors(text: str, tag: str) -> None:
    doc = parse_text(text, "f.yaml")
    [diagnostic] = doc.diagnostics
    assert diagnostic.line == 1 and diagnostic.path == "a"
    assert f"the tag {tag} is not allowed" in diagnostic.message


def test_anchors_aliases_and_merge_keys() -> None:
    text = "base: &b {x: 1, y: {z: 2}}\nother: &o {w: 0, x: 9}\nc:\n  <<: [*b, *o]\n  y: 3\nd: *b\n"
    doc = parse_text(text, "f.yaml")
    assert doc.value["c"] == {"x": 1, "y": 3, "w": 0}  # written keys win; earlier merges win
    assert doc.value["d"] == {"x": 1, "y": {"z": 2}}
    assert doc.sources.get(("c", "x")).value.line == 1  # merged value: where the anchor wrote it
    assert doc.sources.get(("c", "w")).value.line == 2
    assert doc.sources.get(("c", "y")).value.line == 5


def _bomb(levels: int) -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [6, 30])
def test_alias_bomb_is_refused_before_it_is_expanded(levels: int) -> None:
    # 30 levels expand to 9**30 values: only counting on the node graph can refuse it at all.
    with pytest.raises(LoadError) as info:
        parse_text(_bomb(levels), "bomb.yaml")
    [diagnostic] = info.value.diagnostics
    assert f"more than {MAX_VALUES} values" in diagnostic.message
    assert diagnostic.path.startswith("l5[")  # 9**6 > MAX_VALUES: the sixth level is where it bursts


def test_alias_expansion_just_under_the_limit_loads() -> None:
    # 9**5 = 59049 "lol"s under l4, plus the lists and the top-level mapping: under MAX_VALUES.
    doc = parse_text(_bomb(5), "bomb.yaml")
    assert len(doc.value["l4"]) == 9 and doc.value["l4"][8][8][8][8] == ["lol"] * 9


TEXTS = {p.name: p.read_text() for p in sorted((ROOT / "pipelines").glob("*.yaml"))} | {"merges": MERGES, "bomb": _bomb(4)}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_counting_on_the_graph_matches_the_values_built(name: str) -> None:
    text = TEXTS[name]
    builder = _Builder(name)
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    builder.build(root, (), 0)
    assert _Expansion().size(root) == builder.count


def test_alias_to_itself_is_an_error() -> None:
    with pytest.raises(LoadError) as info:
        parse_text("a: &a [1, *a]\n", "f.yaml")
    assert "refers to a value that contains it" in info.value.diagnostics[0].message


@pytest.mark.parametrize("depth", [150, 5000, 200_000])
def test_deep_nesting_is_an_error_not_a_crash(depth: int) -> None:
    with pytest.raises(LoadError) as info:
        parse_text("a: " + "[" * depth + "]" * depth + "\n", "f.yaml")
    assert "nested more than" in info.value.diagnostics[0].message


def test_tab_indentation(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, "version: 1\nrunner:\n\tmax_epochs: 1\n"))
    assert message.startswith(f"{tmp_path / 'p.yaml'}:3:1: error: tab character")
    assert "spaces" in message


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, "version: 1\nrunner: [1, 2\nname: x\n"))
    assert ":3:" in message or ":2:" in message
    assert "invalid YAML" in message


def test_two_documents_are_an_error(tmp_path: Path) -> None:
    assert "single document" in load_error(write(tmp_path, "version: 1\n---\nversion: 1\n"))


def test_empty_and_comment_only_files(tmp_path: Path) -> None:
    assert "the file is empty" in load_error(write(tmp_path, ""))
    assert "the file is empty" in load_error(write(tmp_path, "# nothing\n\n"))


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    assert "the top level of the file is a list" in load_error(write(tmp_path, "- 1\n- 2\n"))
    assert "a single value" in load_error(write(tmp_path, "just text\n"))


def test_non_utf8_names_the_byte_and_line(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, b"version: 1\nname: caf\xe9\n"))
    assert ":2:10: error: byte 0xe9 at offset 20 is not valid UTF-8" in message


def test_binary_file(tmp_path: Path) -> None:
    assert "binary file (NUL byte at offset 3)" in load_error(write(tmp_path, b"abc\x00def"))


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, "\ufeffversion: 1\n")).value == {"version": 1}


def test_directory_missing_and_oversized(tmp_path: Path) -> None:
    assert "is a directory" in load_error(tmp_path)
    assert "no such file" in load_error(tmp_path / "nope.yaml")
    big = write(tmp_path, "a: " + "x" * MAX_BYTES + "\n")
    assert "larger than 1 MiB" in load_error(big)


def test_complex_keys_are_errors() -> None:
    doc = parse_text("? [1, 2]\n: x\n", "f.yaml")
    assert "a key must be a plain name" in doc.diagnostics[0].message


def test_positions_of_text_inside_an_argument() -> None:
    doc = parse_text("[1, 2]", "<--set>", line_base=2, col_base=10)
    assert (doc.sources.get((1,)).value.line, doc.sources.get((1,)).value.col) == (3, 15)
    with pytest.raises(LoadError) as info:
        parse_text("[1", "<--set>", line_base=2, col_base=10)
    diagnostic = info.value.diagnostics[0]
    assert diagnostic.line == 3 and diagnostic.col > 10
