"""The ``tunetable`` command: a click group whose subcommands live in ``tunetable.commands``.

Subcommands are imported lazily so that ``tunetable codegen`` never imports polars or pycuda,
and a GPU-side machine without polars can still run ``grid``, ``compile`` and ``bench``.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from tunetable.errors import TuneTableError

# name -> module under tunetable.commands exposing a click command named ``command``
SUBCOMMANDS: dict[str, str] = {
    "codegen": "codegen",
    "grid": "grid",
    "compile": "compile",
    "bench": "bench",
    "record": "record",
    "rank": "rank",
    "profile": "profile",
    "select": "select",
    "metrics": "metrics",
    "audit": "audit",
    "trace": "trace",
    "gc": "gc",
    "kt": "kt",
    "shapes": "shapes",
    "suggest": "suggest",
    "plots": "plots",
    "tune-device": "tune_device",
}


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every subcommand's name, sorted."""
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The subcommand's click command, imported on demand (None when unknown or not built yet)."""
        module_name = SUBCOMMANDS.get(cmd_name)
        if module_name is None:
            return None
        try:
            module = importlib.import_module(f"tunetable.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("tunetable.commands"):
                return None  # not built yet
            raise
        return module.command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tunetable")
def cli() -> None:
    """tunetable: grid -> compile -> bench -> rank -> select -> codegen, versioned with DVC."""


def enter_build_working_directory() -> None:
    """Under ``bazel run`` change into the caller's folder (``BUILD_WORKING_DIRECTORY``), as Modular's tools do.

    Relative paths on the command line then mean what they meant where the user typed them.
    """
    directory = os.environ.get("BUILD_WORKING_DIRECTORY")
    if not directory:
        return
    try:
        os.chdir(directory)
    except OSError as exc:
        raise TuneTableError(f"cannot change into it: {exc.strerror}", path=directory,
                             where="BUILD_WORKING_DIRECTORY") from None


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user errors become one line on stderr and their exit status."""
    try:
        enter_build_working_directory()
        # standalone_mode=False returns ctx.exit(n) codes instead of raising them.
        status = cli.main(args=argv, prog_name="tunetable", standalone_mode=False)
    except TuneTableError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # One line, like every other user error: the problem, then where to read the command's options.
        command = exc.ctx.command_path if exc.ctx is not None else "tunetable"
        click.echo(f"error: {exc.format_message()} (see `{command} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    if isinstance(status, int) and status:
        sys.exit(status)
