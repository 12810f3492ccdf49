"""The ``bunko`` command line (R32): ingest, search, ask, usage, collections, documents, and the rest.

Data goes to stdout (plain text, or JSON with ``--json``); progress and messages
go to stderr. Errors print one line (``--json``: ``{"error": {"type", "message"}}``
on stdout; ``ask --stream --json``: ``{"type": "error", "error": {...}}`` as the last
event line) and exit non-zero; a stack trace is shown only with ``BUNKO_DEBUG=1``.

Settings come from flags, then environment variables, then ``bunko.toml`` (in the
working directory, or ``--config PATH``), then defaults; see :mod:`bunko.config`.
API keys are read only from the environment or the config file.

The package: :mod:`~bunko.cli.root` is the ``bunko`` group and attaches every command;
:mod:`~bunko.cli.common` holds what the commands share (output, errors, the engine, progress, the
shared options); each other module is one command or command group. ``bunko.cli:main`` is the
console script.
"""

from .root import cli, main

__all__ = ["cli", "main"]
