"""The keyword postings a backend holds in memory unless told: an eighth of the memory the process may use
(the machine's, or its container's limit when lower), within 256 MiB and 4 GiB (config.keyword_memory_bytes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bunko import config
from bunko.config import keyword_memory_bytes, usable_memory

MIB, GIB = 2**20, 2**30


def test_a_setting_is_taken_as_given_and_none_is_a_share_of_the_memory_within_bounds() -> None:
    assert keyword_memory_bytes(0) == 0
    assert keyword_memory_bytes(3) == 3 * MIB
    assert keyword_memory_bytes(10_000, usable=GIB) == 10_000 * MIB  # a setting is not capped by the share
    assert keyword_memory_bytes(None, usable=24 * GIB) == 3 * GIB
    assert keyword_memory_bytes(None, usable=16 * GIB) == 2 * GIB  # a million chunks' postings (1.9 GiB) fit
    assert keyword_memory_bytes(None, usable=GIB) == 256 * MIB  # never below the floor
    assert keyword_memory_bytes(None, usable=512 * GIB) == 4 * GIB  # nor above the cap


def test_unknown_memory_gives_the_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "usable_memory", lambda: None)
    assert keyword_memory_bytes(None) == config.KEYWORD_MEMORY_MIN_MB * MIB


@pytest.mark.parametrize(("path", "text", "limited"), [
    ("sys/fs/cgroup/memory.max", "1073741824\n", True),  # cgroup v2, a container of 1 GiB
    ("sys/fs/cgroup/memory.max", "max\n", False),  # cgroup v2, no limit
    ("sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n", True),  # cgroup v1, 2 GiB
    ("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n", False),  # cgroup v1, no limit
])
def test_a_container_limit_below_the_machine_bounds_the_usable_memory(tmp_path: Path, path: str, text: str,
                                                                      limited: bool) -> None:
    machine = usable_memory(tmp_path / "nothing")  # no cgroup files there: the physical memory
    assert machine is not None and machine > 0
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(text)
    found = usable_memory(tmp_path)
    assert found == (min(machine, int(text)) if limited else machine)


def test_processes_started_together_split_the_default_between_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bunko serve --workers N``: each worker holds 1/N of the default, a value set stays as set."""
    for name in ("BUNKO_PG_KEYWORD_MEMORY_MB", "BUNKO_SQLITE_KEYWORD_MEMORY_MB"):
        monkeypatch.delenv(name, raising=False)
    settings = config.Settings.resolve()
    assert settings.for_processes(1) is settings
    split = settings.for_processes(4)
    for section in (split.postgres, split.sqlite):
        assert section.keyword_memory_mb == keyword_memory_bytes(None) // 4 // MIB
    assert settings.postgres.keyword_memory_mb is None  # the settings given are left as they were
    monkeypatch.setenv("BUNKO_PG_KEYWORD_MEMORY_MB", "100")
    split = config.Settings.resolve().for_processes(4)
    assert split.postgres.keyword_memory_mb == 100
    assert split.sqlite.keyword_memory_mb == keyword_memory_bytes(None) // 4 // MIB
