"""The options of `dslrun predict` that belong to a modeler, not to the command.

A modeler declares what shapes its predict records (`register(predict_options=...)`: a
classifier's `--top`, a segmentation's `--overlay` and `--color`, a detector's `--threshold`);
the command offers every registered modeler's, says in each option's help which modelers take
it, and refuses one the pipeline's modeler does not (a new task brings its own options without
an edit here). The values reach the modeler's `record` and, when it has one, its
`configure_predictions(model, options)`, called before the model predicts (a translator's
`--beam-size` changes its search). The registry is read when the command's options are first needed (its help, or
parsing its arguments), so `dslrun --help` and the other commands do not pay for it.
"""

from __future__ import annotations

from typing import Any

import click

from dsl.language.errors import DslError, RegistryError


def declared() -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Every registered modeler's predict option by name: (its declaration, the modelers that take it)."""
    from dsl.language import registry
    from dsl.language.plugins import load_plugins

    registry.load_all()
    load_plugins([], installed=True)  # an installed plug-in's modeler brings its options too
    found: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for component in registry.components("modeler"):
        for name, spec in component.predict_options.items():
            if name in found and _meaning(found[name][0]) != _meaning(spec):
                raise RegistryError(f"modeler {component.type!r} declares the predict option {name!r} unlike "
                                    f"{', '.join(found[name][1])}: the same option must take the same values")
            found.setdefault(name, (spec, []))[1].append(component.type)
    return found


def _meaning(spec: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in spec.items() if key != "help"}


def as_click_option(name: str, spec: dict[str, Any], modelers: list[str]) -> click.Option:
    flag = "--" + name.replace("_", "-")
    help_text = f"{spec['help']} (modeler {' and '.join(modelers)})"
    if spec["type"] == "flag":
        return click.Option([flag, name], is_flag=True, default=False, help=help_text)
    ranged = click.IntRange if spec["type"] == "integer" else click.FloatRange
    return click.Option([flag, name], type=ranged(min=spec.get("minimum"), max=spec.get("maximum")),
                        default=spec.get("default"), show_default=spec.get("default") is not None, help=help_text)


class PredictCommand(click.Command):
    """`dslrun predict`, whose options are its own followed by the registered modelers'."""

    _modeler_options: list[click.Option] | None = None

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        if self._modeler_options is None:
            try:
                found = declared()
            except DslError as exc:  # an installed plug-in that does not import: said, not a traceback
                raise click.ClickException(str(exc)) from None
            self._modeler_options = [as_click_option(name, spec, modelers) for name, (spec, modelers) in sorted(found.items())]
        return [*params[:-1], *self._modeler_options, params[-1]]  # --help stays last


def for_modeler(modeler: str, given: dict[str, Any], ctx: click.Context) -> dict[str, Any]:
    """The values of `modeler`'s own predict options; an option given on the command line that it
    does not take is an error naming the modelers that do."""
    from dsl.language import registry

    mine = registry.lookup("modeler", modeler).predict_options
    everyone = declared()
    for name in given:
        source = ctx.get_parameter_source(name)
        if name not in mine and source == click.core.ParameterSource.COMMANDLINE:
            takers = " and ".join(everyone[name][1])
            raise DslError(f"--{name.replace('_', '-')} is an option of the {takers} modeler's predictions; this "
                           f"pipeline's modeler is {modeler}")
    return {name: given.get(name, spec.get("default")) for name, spec in mine.items()}
