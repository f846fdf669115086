"""``python -m modelcompare`` is the ``modelcompare`` console script."""

from modelcompare.service.cli import main

main()
