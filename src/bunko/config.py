"""Settings: where data lives and which backends to use, from arguments then environment.

Precedence: explicit argument > environment variable > default.

* ``BUNKO_HOME`` — data folder (default ``$XDG_DATA_HOME/bunko``, else ``~/.local/share/bunko``).
* ``BUNKO_DATABASE_URL`` — store URL (default ``sqlite:///$BUNKO_HOME/bunko.db``).
* ``BUNKO_EMBEDDER`` — embedder as ``provider`` or ``provider:model`` (default ``use``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TENANT = "default"
DEFAULT_COLLECTION = "default"


def default_home() -> Path:
    """The data folder when ``BUNKO_HOME`` is not set."""
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "bunko"


@dataclass(slots=True, frozen=True)
class Settings:
    """Resolved settings for one engine."""

    home: Path
    database_url: str
    embedder: str

    @classmethod
    def resolve(
        cls,
        database_url: str | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        embedder: str | None = None,
    ) -> Settings:
        """Settings from arguments, then environment variables, then defaults."""
        home_path = Path(home or os.environ.get("BUNKO_HOME") or default_home()).expanduser()
        url = database_url or os.environ.get("BUNKO_DATABASE_URL") or f"sqlite:///{home_path / 'bunko.db'}"
        return cls(home=home_path, database_url=url, embedder=embedder or os.environ.get("BUNKO_EMBEDDER") or "use")
