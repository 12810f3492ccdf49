"""``python -m bunko.cli`` runs the CLI, as ``python -m bunko`` does."""

from . import main

main()
