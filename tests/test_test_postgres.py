"""The test PostgreSQL runs on any x86-64 CPU with AVX2, not only on machines with AVX-512.

A server compiled with ``-march=native`` on an AVX-512 machine passes every query-level test there and dies
with SIGILL elsewhere, so these tests read its machine code (``objdump``) instead of asking it.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from bunko.testing.postgres import avx512_outside_dispatch, server_install, server_vector_so

pytestmark = [
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX-512 is an x86-64 matter"),
    pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("as") is None,
                       reason="needs binutils (objdump, as) to read machine code"),
]

# Each function is one kind of instruction the check must catch, or must let pass.
_ASSEMBLY = """
    .text
    .globl cosine_distance, l2_normalize, array_to_vector, vector_norm, inner_product
    .globl BitHammingDistanceAvx512Popcount, pg_popcount_avx512, l2_distance
cosine_distance:                      # a 512-bit register
    vaddps %zmm1, %zmm2, %zmm3
    ret
l2_normalize:                         # EVEX on 256-bit registers (AVX-512VL), no zmm in sight
    vpternlogd $0xff, %ymm1, %ymm2, %ymm3
    ret
array_to_vector:                      # an upper register, only reachable with EVEX
    vmovaps %xmm17, %xmm1
    ret
vector_norm:                          # a mask register
    kmovw %k1, %eax
    ret
BitHammingDistanceAvx512Popcount:     # pgvector's run-time-dispatched AVX-512 code is allowed
    vpopcntq %zmm0, %zmm1
    ret
pg_popcount_avx512:                   # and so is PostgreSQL's
    vpopcntq %zmm0, %zmm1
    ret
inner_product:                        # AVX2 with VEX encoding is fine
    vfmadd231ps %ymm1, %ymm2, %ymm0
    vaddps %ymm1, %ymm2, %ymm3
    ret
l2_distance:                          # SSE is fine
    addps %xmm1, %xmm0
    ret
"""


def test_the_check_finds_avx512_outside_run_time_dispatch(tmp_path: Path) -> None:
    source = tmp_path / "kinds.s"
    source.write_text(_ASSEMBLY)
    subprocess.run(["as", "--64", "-o", str(tmp_path / "kinds.o"), str(source)], check=True)
    found = avx512_outside_dispatch(tmp_path / "kinds.o")
    assert found == {"cosine_distance": 1, "l2_normalize": 1, "array_to_vector": 1, "vector_norm": 1}


def test_the_test_servers_pgvector_has_no_avx512_outside_run_time_dispatch() -> None:
    library = server_vector_so()
    assert avx512_outside_dispatch(library) == {}, (
        f"{library} holds AVX-512 instructions that no CPU check guards: PostgreSQL would die with SIGILL "
        "on CPUs without AVX-512 (built with -march=native?)")


def test_the_test_servers_postgres_and_libraries_have_no_avx512_outside_run_time_dispatch() -> None:
    install = server_install()
    binaries = [install / "bin" / "postgres", *sorted(install.glob("lib/**/*.so"))]
    assert len(binaries) > 10
    unguarded = {str(path.relative_to(install)): found for path in binaries if (found := avx512_outside_dispatch(path))}
    assert unguarded == {}
