"""One benchmark case of a task beyond image classification, in one process.

    python bench/tasks.py --task segmentation|text|detection|translation --case dslrun|fit|loop --data DIR ...
    python bench/tasks.py --task translation --case decode --beam-size 4 --data DIR ...

dslrun trains the shipped pipeline (pipelines/segmentation.yaml, pipelines/text_classification.yaml,
pipelines/detection.yaml) on the data in DIR, as `dslrun FILE --set ...` would, with only its length, batch size and run
directory changed (and its callbacks off, as the references have none). The references are
what a user would write by hand with Keras for the same task: the same network (built by the
pipeline's own network builder), the same batches (the pipeline's inputter and augmenter),
the same optimizer settings, and the task's usual Keras loss and metrics — `model.fit`, and
a `tf.function` loop. Keras has no detection loss: its reference matches the boxes to the same
anchors and computes the same focal + smooth-L1 loss by hand, as keras.io's RetinaNet example
does (bench/detection_reference.py). Translation's references train the same Transformer with
keras.io's loss for it (sparse cross-entropy ignoring the padding id) on the same padded batches;
`--case decode` times the model's in-graph search alone (beam search, or greedy with
`--beam-size 1`) on val batches. Prints one JSON line in bench/cases.py's format
("images_per_second" counts examples: images, texts, sentence pairs or sentences decoded).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cases import Clock, report  # noqa: E402  (bench/ is put on the path above)

PIPELINES = {"segmentation": ROOT / "pipelines" / "segmentation.yaml",
             "text": ROOT / "pipelines" / "text_classification.yaml",
             "detection": ROOT / "pipelines" / "detection.yaml",
             "translation": ROOT / "pipelines" / "translation.yaml"}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", required=True, choices=sorted(PIPELINES))
    parser.add_argument("--case", required=True, choices=["dslrun", "fit", "loop", "decode"])
    parser.add_argument("--beam-size", type=int, default=4, help="the decode case's search (1: greedy)")
    parser.add_argument("--data", required=True, help="the task's data, as `dslrun data synthetic-...` writes it")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--launched-at", type=float, default=0.0)
    args = parser.parse_args()
    # The fields bench/cases.py's report reads.
    args.input, args.threads, args.precision = args.task, 0, "float32"
    return args


def pipeline(args: argparse.Namespace, run: str) -> Any:
    """The shipped pipeline with only the run's length, batch size and directory changed (typed)."""
    from dsl.language.pipeline import load_resolved

    iters = args.warmup + args.steps
    overrides = [f"runner.model_dir={run}", f"runner.workflow=[[train, {iters}]]", f"runner.max_iters={iters}",
                 "runner.max_epochs=null", f"inputter.batch_size={args.batch}", "callbacks=[]"]
    return load_resolved(PIPELINES[args.task], overrides, environ={**os.environ, "DATA_DIR": args.data})


def run_dslrun(args: argparse.Namespace) -> None:
    from dsl.commands._training import build_runner

    clock = Clock(args.warmup, args.launched_at, args.steps)

    with tempfile.TemporaryDirectory() as run:
        runner = build_runner(pipeline(args, run), resume=False)
        runner.add_callback(clock.dslrun_callback())
        runner.run()
        report(args, clock, runner.placement.world_size, runner.placement.rank, {"retraces": dict(runner.traces)})


def reference_parts(args: argparse.Namespace, run: str) -> tuple[Any, Any, Any, Any]:
    """The network, an endless dataset of the pipeline's train batches, its optimizer, and the
    context (what the data is) — everything a hand-written script would set up the same way."""
    import tensorflow as tf

    from dsl.engine.compiler import compile_pipeline, configure_tensorflow
    from dsl.language.context import Placement

    resolved = pipeline(args, run)
    seed = configure_tensorflow(resolved)
    compiled = compile_pipeline(resolved, Placement(), seed)
    data = compiled.inputter.dataset("train", compiled.augmenter.train, seed=seed).repeat()
    if args.task == "detection":  # the targets coded per anchor in the input pipeline, as keras.io does
        from detection_reference import reference

        encoder, _ = reference(resolved.to_dict(), compiled.context.image_shape, compiled.context.num_classes)
        data = data.map(encoder.encode_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    optimizer = compiled.modeler.optimizer(compiled.context.steps_per_epoch)
    return compiled.model, data, optimizer, compiled.context


def keras_loss_and_metrics(task: str, context: Any) -> tuple[Any, list[Any]]:
    """The task's usual Keras loss and metrics, as its Keras tutorial would write them."""
    import tensorflow as tf

    if task == "segmentation":
        ignore = context.fact("ignore_label")
        loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=ignore)
        return loss, [tf.keras.metrics.MeanIoU(context.num_classes, sparse_y_pred=False, ignore_class=ignore),
                      tf.keras.metrics.SparseCategoricalAccuracy()]
    if task == "translation":  # keras.io's English-to-Spanish Transformer: padding ignored; the model's dict output
        return MaskedOnLogits(tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)), []
    if task == "detection":  # no train metric, as dslrun's object_detection modeler (mAP is a val metric)
        from detection_reference import reference

        return reference(context.pipeline.to_dict(), context.image_shape, context.num_classes)[1], []
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), [tf.keras.metrics.SparseCategoricalAccuracy()]


class MaskedOnLogits:
    """A Keras loss applied to the translation network's `logits` output (its outputs are a dict)."""

    def __init__(self, loss: Any) -> None:
        self.loss = loss

    def __call__(self, targets: Any, outputs: Any) -> Any:
        return self.loss(targets, outputs["logits"] if isinstance(outputs, dict) else outputs)


def run_fit(args: argparse.Namespace) -> None:

    with tempfile.TemporaryDirectory() as run:
        model, data, optimizer, context = reference_parts(args, run)
        loss, metrics = keras_loss_and_metrics(args.task, context)
        if args.task == "translation":  # fit matches a dict output to a dict of targets
            data = data.map(lambda features, targets: (features, {"logits": targets}))
            loss = {"logits": loss.loss}
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics)
        clock = Clock(args.warmup, args.launched_at, args.steps)
        model.fit(data, steps_per_epoch=args.warmup + args.steps, epochs=1, verbose=0, callbacks=[clock.keras_callback()])
        report(args, clock, 1, 0)


def loop_step(model: Any, loss_fn: Any, metrics: list[Any], optimizer: Any) -> Any:
    """The `loop` case's compiled step, as a hand-written script would write it."""
    import tensorflow as tf

    @tf.function
    def train_step(features: Any, targets: Any) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = loss_fn(targets, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        for metric in metrics:
            metric.update_state(targets, logits)
        return loss

    return train_step


def run_loop(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as run:
        model, data, optimizer, context = reference_parts(args, run)
        loss_fn, metrics = keras_loss_and_metrics(args.task, context)
        train_step = loop_step(model, loss_fn, metrics, optimizer)
        clock = Clock(args.warmup, args.launched_at, args.steps)
        for step, (features, targets) in enumerate(data.take(args.warmup + args.steps)):
            tick = time.perf_counter()
            float(train_step(features, targets))  # a user logs the loss; it also makes the timing honest
            clock.step_done(step + 1, time.perf_counter() - tick)
        report(args, clock, 1, 0)


def run_decode(args: argparse.Namespace) -> None:
    """Sentences per second of the network's search alone, in a tf.function, on the val batches."""
    import tensorflow as tf

    from dsl.engine.compiler import compile_pipeline, configure_tensorflow
    from dsl.language.context import Placement

    with tempfile.TemporaryDirectory() as run:
        resolved = pipeline(args, run)
        compiled = compile_pipeline(resolved, Placement(), configure_tensorflow(resolved))
        model = compiled.model
        model.beam_size = args.beam_size
        search = tf.function(lambda source: model({"source": source}, training=False)["tokens"])
        batches = compiled.inputter.dataset("val", batch_size=args.batch).repeat()
        clock = Clock(args.warmup, args.launched_at, args.steps)
        for step, (features, _) in enumerate(batches.take(args.warmup + args.steps)):
            tick = time.perf_counter()
            search(features["source"]).numpy()
            clock.step_done(step + 1, time.perf_counter() - tick)
        report(args, clock, 1, 0, {"beam_size": args.beam_size})


def whole_calls(args: argparse.Namespace) -> None:
    """Warm-up and timed steps rounded up to whole graph calls of the pipeline's
    `runner.steps_per_call` (the timer sees a call's end), for every case alike."""
    with tempfile.TemporaryDirectory() as run:
        per_call = pipeline(args, run).runner.steps_per_call
    args.warmup = -(-args.warmup // per_call) * per_call
    args.steps = -(-args.steps // per_call) * per_call


def main() -> None:
    args = parse()
    whole_calls(args)
    if args.case == "decode" and args.task != "translation":
        raise SystemExit("--case decode times a translation network's search: use --task translation")
    {"dslrun": run_dslrun, "fit": run_fit, "loop": run_loop, "decode": run_decode}[args.case](args)


if __name__ == "__main__":
    main()
