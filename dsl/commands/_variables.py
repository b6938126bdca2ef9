"""`dslrun show --variables FILE`: the built network's variables, as `init_checkpoint` names them.

One row per variable: its name (`conv_1/kernel`, what `skip` and `trainable` patterns
search), its shape, its group (`head` or `backbone`, dsl/networks/_groups.py) and whether
the optimizer trains it (`statistics`: a batch-norm layer's moving mean and variance, which
follow the data while the layer is not frozen, but no gradient). With an
`init_checkpoint` callback the table is the plan the run will apply at its start: where each
variable's first value comes from (`restored` from the file, `reset` head, `skipped`, or
`fresh` when the file lacks it or is not written yet) and which layers `trainable` and
`freeze_batch_norm` freeze. Building the network needs the inputter's facts (image shape,
classes), so the data is read, and TensorFlow is imported: this is the one `show` that does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsl.language.resolved import Pipeline


def variables_table(pipeline: Pipeline) -> str:
    """The table of the network `pipeline` builds (text, one line per variable)."""
    from dsl.callbacks.init_checkpoint import plan_at_start
    from dsl.commands._training import single_process
    from dsl.engine.compiler import compile_pipeline, configure_tensorflow
    from dsl.language.context import Placement
    from dsl.networks import head_layer_names, head_variable_names

    pipeline = single_process(pipeline)
    compiled = compile_pipeline(pipeline, Placement(), configure_tensorflow(pipeline))
    model = compiled.model
    head = head_variable_names(model)
    restoring = pipeline.callbacks_of("init_checkpoint")
    origins, note = plan_at_start(model, restoring[0].arguments()) if restoring else ({}, "")
    trained = {id(variable) for variable in model.trainable_weights}  # what the optimizer gets (frozen layers' are out)
    # A batch-norm layer that is not frozen updates its moving statistics from the data as it trains:
    # "no" read as "kept from the file" to a trial.
    import tensorflow as tf

    updated = {id(variable) for layer in model.submodules if isinstance(layer, tf.keras.layers.BatchNormalization)
               and layer.trainable for variable in layer.non_trainable_weights}
    rows = [("variable", "shape", "group", *(["first value"] if restoring else []), "trained")]
    for variable in model.weights:
        name = variable.name.rsplit(":", 1)[0]
        state = "yes" if id(variable) in trained else "statistics" if id(variable) in updated else "no"
        rows.append((name, str(tuple(variable.shape)), "head" if name in head else "backbone",
                     *([origins.get(name, "fresh")] if restoring else []), state))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    count = sum(int(v.shape.num_elements() or 0) for v in model.weights)
    lines.append(f"{pipeline.network.type}: {len(rows) - 1} variables, {count:,} values; "
                 f"head layers: {', '.join(head_layer_names(model))} (init_checkpoint's skip/trainable accept "
                 f"head and backbone)" + (f"; {note}" if note else ""))
    if restoring and "does not exist (yet)" in note:  # said first: a table of `fresh` read as a plan (trial B17)
        lines.insert(0, f"warning: {note.split(';')[0]}")
    return "\n".join(lines) + "\n"

