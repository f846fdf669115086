"""``python -m service`` is the ``modelcompare`` console script."""

from service.cli import main

main()
