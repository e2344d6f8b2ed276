"""``python -m sim.cli``: the ``weaveplace`` command."""

from sim.cli import main

main()
