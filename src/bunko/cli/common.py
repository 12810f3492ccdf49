"""What every command module of :mod:`bunko.cli` shares: output, errors, the engine, progress and options.

Data goes to stdout (:data:`stdout`, or JSON through :func:`emit_json`); progress and messages go to
:data:`stderr`. :func:`handle_errors` turns an error into one line (``--json``: ``{"error": {"type",
"message"}}`` on stdout; ``ask --stream --json``: ``{"type": "error", "error": {...}}`` as the last event
line) and a non-zero exit; a stack trace is shown only with ``BUNKO_DEBUG=1``.

The options several commands take are declared here once. Each is a factory (``@tenant_option()``) so
that a command whose option means something narrower can say so in its help, e.g.
``@json_option(help="Print every block with its config schema as JSON.")``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from ..config import DEFAULT_COLLECTION, DEFAULT_TENANT, Settings
from ..engine import Bunko
from ..errors import BunkoError, FilterError
from ..progress import Reporter

F = TypeVar("F", bound=Callable[..., Any])
#: What ``click.option`` returns: a decorator that gives a command (or its callback) one more option.
FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
EXIT_ERROR = 1
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

stderr = Console(stderr=True, highlight=False, soft_wrap=True)
stdout = Console(highlight=False, soft_wrap=True)


# -- output and errors ------------------------------------------------------------------------------
def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (non-ASCII text as it is)."""
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def fail(error_type: str, message: str, as_json: bool, code: int = EXIT_ERROR,
         extra: dict[str, Any] | None = None, *, event: bool = False) -> NoReturn:
    """Print one error (a JSON object, a JSON event line, or a red line on stderr) and exit with ``code``."""
    error = {"type": error_type, "message": message, **(extra or {})}
    if as_json and event:  # a stream of JSON lines ends with an error event
        click.echo(json.dumps({"type": "error", "error": error}, ensure_ascii=False))
    elif as_json:
        emit_json({"error": error})
    else:
        stderr.print(f"[bold red]error:[/] {escape(message)}")
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn bunko errors into one clear line and a non-zero exit; never a stack trace."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        event = bool(kwargs.get("stream"))
        try:
            return func(*args, **kwargs)
        except BunkoError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, BunkoError) else exc
            extra: dict[str, Any] = {"code": cause.code}
            if isinstance(cause, FilterError):
                extra["problems"] = [p.to_dict() for p in cause.problems]
            fail(type(cause).__name__, exc.message, as_json, extra=extra, event=event)
        except KeyboardInterrupt:
            fail("Interrupted", "interrupted", as_json, EXIT_INTERRUPTED, event=event)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:
            if os.environ.get("BUNKO_DEBUG"):
                raise
            fail(
                "InternalError",
                f"unexpected {type(exc).__name__}: {exc} (this is a bug in bunko; rerun with BUNKO_DEBUG=1 "
                "for the traceback and report it)",
                as_json,
                EXIT_INTERNAL,
                event=event,
            )

    return wrapper  # type: ignore[return-value]


def confirm(question: str, yes: bool, as_json: bool, *, refused: str = "nothing was deleted") -> None:
    """Ask on a terminal; without one (or with --json) refuse unless --yes was given (``refused`` says what did
    not happen)."""
    if yes:
        return
    if as_json or not stderr.is_terminal:
        fail("ConfirmationRequired", f"{question} {refused[:1].upper()}{refused[1:]}: add --yes to confirm", as_json)
    if not click.confirm(question, default=False, err=True):
        fail("Aborted", refused, as_json)


# -- what a command works with ----------------------------------------------------------------------
def get_engine(ctx: click.Context, **settings: Any) -> Bunko:
    """The engine of this invocation; ``settings`` are the command's flags (None = not given)."""
    obj = ctx.find_root().obj
    if obj.get("engine") is None:
        obj["engine"] = Bunko(obj.get("db"), home=obj.get("home"), config=obj.get("config"),
                              **{k: v for k, v in settings.items() if v is not None})
        ctx.find_root().call_on_close(obj["engine"].close)
    return obj["engine"]


def resolve_settings(ctx: click.Context, **overrides: Any) -> Settings:
    """The settings of the ``bunko`` group's --db, --home and --config, with ``overrides`` on top."""
    obj = ctx.find_root().obj or {}
    return Settings.resolve(obj.get("db"), home=obj.get("home"), config=obj.get("config"), **overrides)


def database_url(ctx: click.Context) -> str:
    """The store URL of this invocation (flag, environment, config file or the default)."""
    return resolve_settings(ctx).database_url


def open_records(ctx: click.Context) -> Any:
    """The service records (tenants, API keys) of the store, closed when the command ends."""
    from ..stores import open_backend
    from ..stores.service import service_records

    backend = open_backend(database_url(ctx))
    ctx.find_root().call_on_close(backend.close)
    return service_records(backend)


def reporter(ctx: click.Context, quiet: bool = False) -> Reporter:
    """The progress of a long command: a bar on a terminal, a line every few seconds otherwise."""
    return Reporter(stderr, quiet=quiet or bool(ctx.find_root().obj.get("quiet")))


# -- options ----------------------------------------------------------------------------------------
def options(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """One decorator that applies ``decorators`` as if they were written one above the other, in this order
    (so ``--help`` lists their options in this order)."""

    def decorate(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return decorate


def tenant_option(help: str = "Tenant whose data to use (env BUNKO_TENANT).") -> Callable[[FC], FC]:
    """``--tenant/-t``, default ``default``, from ``BUNKO_TENANT``."""
    return click.option("--tenant", "-t", default=DEFAULT_TENANT, show_default=True, envvar="BUNKO_TENANT",
                        help=help)


def collection_option(help: str = "Collection inside the tenant (env BUNKO_COLLECTION).") -> Callable[[FC], FC]:
    """``--collection/-c``, default ``default``, from ``BUNKO_COLLECTION``."""
    return click.option("--collection", "-c", default=DEFAULT_COLLECTION, show_default=True,
                        envvar="BUNKO_COLLECTION", help=help)


JSON_HELP = "Print machine-readable JSON on stdout."


def json_option(help: str = JSON_HELP) -> Callable[[FC], FC]:
    """``--json``, passed to the command as ``as_json`` (which :func:`handle_errors` reads too)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def json_command(help: str = JSON_HELP) -> Callable[[F], F]:
    """What every command ends with: :func:`json_option`, the click context as its first argument, and
    :func:`handle_errors` around its body (put decorators that change its arguments below this one)."""

    def decorate(func: F) -> F:
        return json_option(help)(click.pass_context(handle_errors(func)))  # type: ignore[return-value]

    return decorate


def quiet_option(help: str = "No progress output on stderr.") -> Callable[[FC], FC]:
    """``--quiet/-q``: no progress (the ``bunko`` group's own --quiet turns it off for every command)."""
    return click.option("--quiet", "-q", is_flag=True, help=help)


def yes_option(help: str = "Do not ask for confirmation.") -> Callable[[FC], FC]:
    """``--yes/-y`` for the commands that delete (see :func:`confirm`)."""
    return click.option("--yes", "-y", is_flag=True, help=help)


EMBEDDER_HELP = (
    "Embedder, e.g. use (bundled, default) or openai-compatible:MODEL (env BUNKO_EMBEDDER; config "
    "[embedder] model; URL and key from BUNKO_EMBEDDER_BASE_URL / BUNKO_EMBEDDER_API_KEY). A collection "
    "keeps the embedder it was built with."
)

#: The embedder of the memory commands and ``bunko mcp``, worded for memory stores.
MEMORY_EMBEDDER_HELP = "Embedder (env BUNKO_EMBEDDER); a memory store keeps the one it was built with."


def embedder_option(help: str = EMBEDDER_HELP) -> Callable[[FC], FC]:
    """``--embedder PROVIDER[:MODEL]`` (None = the configured one)."""
    return click.option("--embedder", metavar="PROVIDER[:MODEL]", default=None, help=help)
