"""A task declares its own facts and batch words (dsl/language/facts.py); the language knows only
the facts every task's data shares. No TensorFlow."""

from __future__ import annotations

import pytest

from dsl.language.context import BuildContext
from dsl.language.facts import batch_words, task_facts
from dsl.language.rules import declare, example_spec


def test_the_tasks_declare_their_own_facts_and_targets() -> None:
    assert {"max_boxes", "ignore_label"} <= set(task_facts())
    words = batch_words()
    assert {"image", "tokens", "class", "mask", "boxes"} <= set(words)
    assert words["mask"].meaning == "a class per pixel (a mask)"


def test_a_declared_task_fact_comes_from_the_inputter_parameter_the_task_named() -> None:
    pipeline = {"inputter": {"type": "object_detection_csv", "num_classes": 3, "image_shape": [64, 64, 3],
                             "max_boxes": 7}}
    declared = declare(pipeline)
    assert declared.fact("max_boxes") == 7 and declared.where["max_boxes"] == ("inputter", "max_boxes")
    assert declared.fact("num_classes") == 3 and declared.fact("ignore_label") is None
    assert declared.facts() == {"num_classes": 3, "image_shape": (64, 64, 3), "max_boxes": 7}
    features, targets = example_spec(("image", "boxes"), declared) or []
    assert features == ((64, 64, 3), "float32")
    assert targets == {"boxes": ((7, 4), "float32"), "classes": ((7,), "int32"), "count": ((), "int32")}


def test_a_batch_word_nobody_registered_has_no_example() -> None:
    assert example_spec(("image", "sentences"), declare({"inputter": {}})) is None


def test_the_build_context_learns_a_tasks_fact_and_refuses_an_unknown_one() -> None:
    context = BuildContext()
    context.learn({"num_classes": 4, "image_shape": [8, 8, 3], "ignore_label": 255})
    assert (context.num_classes, context.image_shape, context.fact("ignore_label")) == (4, (8, 8, 3), 255)
    assert context.fact("max_boxes", 1) == 1
    with pytest.raises(TypeError, match="the inputter reports colour_space, which no field of BuildContext nor any "
                                        "registered fact names"):
        context.learn({"colour_space": "rgb"})
