"""The BLAS thread cap of a server process: each API and upload-worker process uses ``[server] blas_threads``.

Several processes share the machine's cores; BLAS libraries would each start a thread per core and
oversubscribe it (see ``ServerSettings``). Both the API app (:mod:`.app`) and the upload workers
(:mod:`.worker`) apply the cap when they start.
"""

from __future__ import annotations

import logging

from ..embedders import cap_blas_threads

logger = logging.getLogger(__name__)


def limit_blas_threads(threads: int) -> None:
    """Cap the BLAS thread pool of this process at ``threads``."""
    cap_blas_threads(threads)  # and the bundled embedder's calls side by side
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - part of the "server" extra
        logger.warning("threadpoolctl is not installed: BLAS threads are not limited")
        return
    threadpool_limits(limits=threads, user_api="blas")


__all__ = ["limit_blas_threads"]
