"""Custom components from outside dslrun: installed plugins and `--plugin MODULE`.

A pipeline only ever *names* a `type`; it never names code to import. Code that adds
types comes from two places the user controls, never from the YAML:

- installed plugins: packages that declare an entry point in the group `dslrun.plugins`
  (each entry point names a module that calls `dsl.language.registry.register` at import, or
  `dsl.language.backend_registry.register_backend` for a backend), loaded
  by the commands that build a pipeline (`run`, `eval`, `predict`, `export`), by
  `doctor`, which lists the backends this installation can run (a plugin's among them), and
  by `data`, which lists the data sets the tasks can generate (a plug-in task's among them);
- `--plugin MODULE` (repeatable) on any command that reads a pipeline: the module is
  imported before the pipeline is checked or compiled.

`validate`, `show`, `schema` and `list` load no installed plugin: they only know a
plugin's types when `--plugin` names it, so checking a pipeline from an untrusted source
runs no third-party code unless asked to.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import click

from dsl.language.errors import DslError

ENTRY_POINT_GROUP = "dslrun.plugins"

# Commands that build a pipeline (and doctor, which reports the installation) load installed
# plugins too; the others only take --plugin.
LOADS_INSTALLED = frozenset({"run", "eval", "predict", "export", "doctor", "sweep", "data"})
TAKES_PLUGIN = LOADS_INSTALLED | {"validate", "show", "schema", "list"}


class PluginError(DslError):
    """A plugin module that cannot be imported or registers a clashing type."""


def installed_plugins() -> list[tuple[str, str]]:
    """(entry point name, module) of every installed package's `dslrun.plugins` entry point."""
    from importlib.metadata import entry_points

    return sorted((point.name, point.value) for point in entry_points(group=ENTRY_POINT_GROUP))


def load_plugins(modules: Sequence[str], installed: bool) -> list[str]:
    """Import the `--plugin` modules (and, with `installed`, every installed plugin); returns their names.

    The built-in components and backends are registered first, so a plugin reusing a built-in
    type or backend name is the one reported.
    """
    wanted = [(f"installed plugin {name!r}", module) for name, module in installed_plugins()] if installed else []
    wanted += [(f"--plugin {module}", module) for module in modules]
    if not wanted:
        return []
    from dsl.language import backend_registry, registry

    registry.load_all()
    backend_registry.load_all()
    loaded = []
    for origin, module in wanted:
        _import(origin, module.split(":")[0].strip())
        loaded.append(module)
    return loaded


def _import(origin: str, module: str) -> None:
    from dsl.language.errors import RegistryError

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise PluginError(f"{origin}: no module named {module!r} (is the package installed, or on PYTHONPATH?)") from None
        raise PluginError(f"{origin}: importing it failed: {exc}") from None
    except RegistryError as exc:
        raise PluginError(f"{origin}: {exc}; rename the plugin's type") from None
    except Exception as exc:  # third-party code: report any failure as one line
        raise PluginError(f"{origin}: importing it failed: {type(exc).__name__}: {exc}") from None


def add_plugin_option(command: click.Command) -> click.Command:
    """Give `command` a repeatable `--plugin MODULE` option that imports the modules before it runs."""
    if command.name not in TAKES_PLUGIN or command.callback is None:
        return command
    installed = command.name in LOADS_INSTALLED
    command.params.append(click.Option(
        ["--plugin", "plugins"], multiple=True, metavar="MODULE",
        help="Import this Python module first, so the component types it registers can be used (repeatable)."
        + (" Installed plugins (entry points `dslrun.plugins`) are loaded as well." if installed
           else " Installed plugins are not loaded by this command."),
    ))
    command.callback = _with_plugins(command.callback, installed)
    return command


def _with_plugins(callback: Callable[..., Any], installed: bool) -> Callable[..., Any]:
    @functools.wraps(callback)
    def wrapper(*args: Any, plugins: tuple[str, ...] = (), **kwargs: Any) -> Any:
        load_plugins(plugins, installed)  # a PluginError is a user error: the CLI prints it (dsl.cli)
        return callback(*args, **kwargs)

    return wrapper
