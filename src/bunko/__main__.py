"""``python -m bunko`` runs the CLI."""

from .cli import main

main()
