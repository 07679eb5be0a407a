"""``python -m lockwatch`` runs the command line."""

from lockwatch.cli import main

main()
