"""``python -m lockwatch`` runs the command line, its imports collected less
often (util/memory.py: ``GC_THRESHOLDS``)."""

from lockwatch.util.memory import collect_less_often

collect_less_often()

from lockwatch.cli import main  # noqa: E402  (after: its imports are most of a start)

main()
