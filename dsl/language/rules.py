"""Component rules: what a component can tell from its parameters and the declared data shapes.

A U-Net whose depth does not divide the image, three `classes` for `num_classes: 4`, a text
filter wider than `sequence_length`: each used to pass `dslrun validate` and fail once `dslrun
run` had read the data and started building. Only the component knows such a rule, so it
states it next to its builder (`register(..., rules=[...])`); `dsl.language.checks.check_component_rules`
hands every rule the facts the YAML declares (`Declared`) and locates what it returns.

A rule is `rule(section, declared) -> list[Problem]`: `section` is the component's resolved
parameters, `declared` the pipeline's data facts with the path each came from. A `Problem`
names the parameter at fault (within the section), the line it conflicts with and the fix,
so the diagnostic names both lines.

Pure Python: `dslrun validate` runs this without TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dsl.language.diagnostics import Path as JsonPath
from dsl.language.facts import PartSpec, batch_words, task_facts


@dataclass(frozen=True)
class Problem:
    """One broken rule: `key` (a path within the section) is at fault; it conflicts with the
    value at `other` (a pipeline path, None when it conflicts with nothing written elsewhere).
    `message` says what and how to fix it; "{other}" in it is replaced by where `other` is
    written (file:line)."""

    key: JsonPath
    message: str
    other: JsonPath | None = None


@dataclass(frozen=True)
class Declared:
    """The data facts a pipeline declares, each with the path it comes from: no data read.

    Attributes:
        pipeline: the resolved pipeline.
        num_classes: the classes the network predicts (network.num_classes, else the inputter's).
        image_shape: (height, width, channels) of an image input, when the inputter has one.
        sequence_length: tokens per text input, when the inputter reads text.
        vocabulary_size: an upper bound of the token ids (the inputter's max_tokens).
        class_names: the classes' names when the pipeline gives them.
        extra: the facts a task registered (dsl.language.facts), by name: `fact(name)`.
        sizes: (path, (height, width)) of every image size the network receives: the
            inputter's image shape (val, predict, serving) and the augmenter's training crop.
        where: fact name -> the pipeline path that declares it.
    """

    pipeline: dict[str, Any]
    num_classes: int | None = None
    image_shape: tuple[int, int, int] | None = None
    sequence_length: int | None = None
    vocabulary_size: int | None = None
    class_names: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    sizes: list[tuple[JsonPath, tuple[int, int]]] = field(default_factory=list)
    where: dict[str, JsonPath] = field(default_factory=dict)

    def fact(self, name: str) -> Any:
        """A fact's value, the language's or a task's (None when the pipeline does not declare it)."""
        return getattr(self, name) if name in _SHARED_FACTS else self.extra.get(name)

    def facts(self) -> dict[str, Any]:
        """The facts a `BuildContext` learns (`dslrun validate --build` builds on them)."""
        shared = {name: getattr(self, name) for name in _SHARED_FACTS if getattr(self, name) is not None}
        return {**shared, **{name: value for name, value in self.extra.items() if value is not None}}


Rule = Callable[[dict[str, Any], Declared], list[Problem]]
# An inputter's facts from its parameters alone: {"num_classes": 10, "image_shape": [32, 32, 3], ...}.
Facts = Callable[[dict[str, Any]], dict[str, Any]]

# The facts of every task's data, and the inputter parameter that declares each; a task's own
# facts come from dsl.language.facts.
_FACT_PARAMS = {"num_classes": "num_classes", "image_shape": "image_shape", "sequence_length": "sequence_length",
                "vocabulary_size": "max_tokens"}
_SHARED_FACTS = ("num_classes", "image_shape", "sequence_length", "vocabulary_size", "class_names")
_NAME_PARAMS = ("classes", "class_names")


def declare(pipeline: dict[str, Any], facts: Facts | None = None) -> Declared:
    """The facts of a resolved pipeline: the inputter's parameters (or its registered `facts`),
    network.num_classes when set, and the augmenter's crop."""
    inputter = pipeline.get("inputter") or {}
    found: dict[str, Any] = {}
    where: dict[str, JsonPath] = {}
    own = {fact.name: fact.param for fact in task_facts().values() if fact.param is not None}
    for fact, param in {**_FACT_PARAMS, **own}.items():
        if inputter.get(param) is not None:
            found[fact], where[fact] = inputter[param], ("inputter", param)
    for param in _NAME_PARAMS:
        if isinstance(inputter.get(param), list):
            found["class_names"], where["class_names"] = list(inputter[param]), ("inputter", param)
    for fact, value in (facts(inputter) if facts is not None else {}).items():
        found[fact] = value
        where.setdefault(fact, ("inputter", "type"))
    network_classes = (pipeline.get("network") or {}).get("num_classes")
    if isinstance(network_classes, int):
        found["num_classes"], where["num_classes"] = network_classes, ("network", "num_classes")
    shape = tuple(int(v) for v in found["image_shape"]) if found.get("image_shape") else None
    sizes: list[tuple[JsonPath, tuple[int, int]]] = []
    if shape is not None:
        sizes.append((where["image_shape"], (shape[0], shape[1])))
        augmenter = pipeline.get("augmenter") or {}
        crop = augmenter.get("crop_size") if isinstance(augmenter, dict) else None
        if isinstance(crop, list) and len(crop) >= 2:
            sizes.append((("augmenter", "crop_size"), (int(crop[0]), int(crop[1]))))
    return Declared(
        pipeline=pipeline,
        num_classes=found.get("num_classes"),
        image_shape=shape,  # type: ignore[arg-type]
        sequence_length=found.get("sequence_length"),
        vocabulary_size=found.get("vocabulary_size"),
        class_names=found.get("class_names"),
        extra={name: found[name] for name in own if found.get(name) is not None},
        sizes=sizes,
        where=where,
    )


def declared_classes(inputter: dict[str, Any]) -> list[str] | None:
    """The class names an inputter section gives: its `classes` list, else what its type's registered
    `facts` read (image_folder's sub-folders, as they are now); None when neither names them. For
    comparing a base run's classes (its saved pipeline) with a fine-tuning pipeline's."""
    from dsl.language import registry
    from dsl.language.errors import RegistryError

    try:
        component = registry.lookup("inputter", str(inputter.get("type")))
        names = declare({"inputter": inputter}, component.facts).class_names
    except (RegistryError, KeyError, TypeError, ValueError):  # an unknown type, a section an older version wrote
        return None
    return [str(name) for name in names] if names else None


def example_spec(batch: tuple[str, str], declared: Declared) -> list[PartSpec] | None:
    """(shape, dtype) of one example's features and targets, from the batch words a component
    declares (`register(batch=...)`, each word registered in dsl.language.facts) and the declared
    facts; None for a word nobody registered. `dslrun validate --build` fills them with zeros."""
    words = batch_words()
    if any(word not in words for word in batch):
        return None
    return [words[word].spec(declared.fact) for word in batch]


def checked(check: Callable[[dict[str, Any]], None], other: JsonPath | None = None) -> Rule:
    """A rule from a check the builder runs anyway (one check, one implementation): its DslError,
    worded `<section>.<key>: <message>`, becomes a Problem at that key, naming `other`'s line."""

    def rule(section: dict[str, Any], declared: Declared) -> list[Problem]:
        from dsl.language.errors import DslError

        try:
            check(section)
        except DslError as exc:
            setting, _, message = str(exc).partition(": ")
            key = _relative(setting)
            if other is not None:
                message = f"{message} ({dotted(other)}: {{other}})"
            return [Problem(key, message, other)]
        return []

    return rule


def _relative(setting: str) -> JsonPath:
    """"modeler.skip_l2_loss_vars[1]" -> ("skip_l2_loss_vars", 1): the path within the section."""
    parts: list[str | int] = []
    for name in setting.replace("]", "").replace("[", ".").split(".")[1:]:
        parts.append(int(name) if name.isdigit() else name)
    return tuple(parts)


def dotted(path: JsonPath) -> str:
    """A pipeline path as a user writes it: inputter.image_shape, callbacks.2.monitor."""
    return ".".join(str(part) for part in path)


def one_per_class(param: str, what: str, kind: str) -> Rule:
    """A rule for a list parameter of a `kind` section that holds one `what` per class (classes,
    class_names, class_weights): its length must be the section's own `num_classes` when it has
    one (an inputter), else the number of classes the pipeline declares."""

    def rule(section: dict[str, Any], declared: Declared) -> list[Problem]:
        values = section.get(param)
        own = section.get("num_classes")
        classes, other = (own, (kind, "num_classes")) if isinstance(own, int) else (
            declared.num_classes, declared.where.get("num_classes"))
        if not isinstance(values, list) or classes is None or other is None or len(values) == classes:
            return []
        return [Problem(
            (param,),
            f"{len(values)} {what} for {classes} classes ({dotted(other)} is {classes}, {{other}}); "
            f"give one per class, or set {dotted(other)}: {len(values)}",
            other,
        )]

    return rule
