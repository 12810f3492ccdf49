"""The ``bunko`` group: the options before any command (--db, --home, --config, --log-level, --quiet), the
logging set up from them, and every command of the package attached to it.

The command modules import only :mod:`bunko.cli.common` (and the rest of bunko), never this module, so
adding a command is one import and one ``add_command`` line here.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from ..version import __version__
from .admin import admin
from .blocks import blocks_command, workflow_command
from .common import LOG_LEVELS, quiet_option
from .db import db
from .documents import collections, documents
from .eval import eval_command
from .ingest import ingest
from .mcp import mcp
from .memory import memory
from .portability import copy_command, export_command, import_command
from .search import ask, search
from .serve import serve
from .stats import stats, usage
from .worker import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--db", metavar="URL", default=None,
              help="Store URL, e.g. sqlite:///path/bunko.db (env BUNKO_DATABASE_URL; default: a SQLite file "
                   "under BUNKO_HOME).")
@click.option("--home", metavar="DIR", default=None, type=click.Path(file_okay=False),
              help="Data folder (env BUNKO_HOME; default ~/.local/share/bunko).")
@click.option("--config", metavar="FILE", default=None, type=click.Path(dir_okay=False),
              help="Config file (env BUNKO_CONFIG; default: ./bunko.toml if it exists).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="warning",
              show_default=True, envvar="BUNKO_LOG_LEVEL",
              help="Which log messages to print on stderr (env BUNKO_LOG_LEVEL). `serve` and `worker` take "
                   "their own --log-level.")
@quiet_option("No progress output on stderr (results and errors still print).")
@click.version_option(__version__, prog_name="bunko")
@click.pass_context
def cli(ctx: click.Context, db: str | None, home: str | None, config: str | None, log_level: str,
        quiet: bool) -> None:
    """bunko (文庫): ingest documents, search them, and get answers with citations.

    Settings: flags > environment variables > bunko.toml > defaults.
    """
    ctx.obj = {"db": db, "home": home, "config": config, "engine": None, "quiet": quiet}
    _configure_logging(log_level)


class _StderrHandler(logging.StreamHandler):
    """Writes to the ``sys.stderr`` of the moment (a test runner may swap it between commands)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _configure_logging(level: str) -> None:
    """Log records of bunko and the libraries it uses go to stderr from ``level`` up."""
    root = logging.getLogger()
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(level.upper())


COMMANDS: tuple[click.Command, ...] = (
    ingest, search, ask, usage, documents, collections, db, serve, admin, eval_command,
    export_command, import_command, copy_command, blocks_command, workflow_command, memory, mcp, stats, worker,
)
for _command in COMMANDS:
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="bunko")
