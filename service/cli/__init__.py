"""The ``modelcompare`` command line.

``serve``, ``worker`` and ``demo`` run the service; ``create``, ``ingest``, ``watch``, ``list``,
``delete`` and ``predict`` talk to a running server through ``modelcompare.service.client``
(``--url`` / ``MODELCOMPARE_URL``, ``--api-key`` / ``MODELCOMPARE_API_KEY``); ``check-model`` checks
a model class of your own. Every error is one readable line on stderr and exit status 1 (2 for
``check-model``'s bad arguments), never a traceback.

The commands are declared in ``parser``; a command's module is imported only once it is chosen.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from modelcompare.service.cli import parser
from modelcompare.service.cli.errors import CliError


def main(argv: Sequence[str] | None = None) -> None:
    args = parser.build().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    run = _implementation(args.run)
    # Here rather than at the top: they import httpx and redis, which --help does without.
    from modelcompare.service.client import (
        API_KEY_ENV,
        URL_ENV,
        ModelCompareError,
        ServerUnreachable,
    )
    from modelcompare.service.store.connection import UnsupportedRedis

    try:
        run(args)
    except ServerUnreachable as exc:
        _fail(f"{exc.message}. Is `modelcompare serve` running there? Set --url or {URL_ENV}.")
    except ModelCompareError as exc:
        hint = f" (use --api-key or {API_KEY_ENV})" if exc.status == 401 else ""
        verb = "is unavailable" if exc.status == 503 else "refused"
        _fail(f"the server {verb}: {exc}{hint}")
    except (CliError, UnsupportedRedis) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        sys.exit(130)


def _implementation(reference: str) -> Callable[[argparse.Namespace], None]:
    """The function a command's ``run`` names: ``module:function``, a module of this package."""
    module, _, function = reference.partition(":")
    implementation: Callable[[argparse.Namespace], None] = getattr(
        importlib.import_module(f"{__name__}.{module}"), function)
    return implementation


def _fail(message: str) -> None:
    print(f"modelcompare: error: {message}", file=sys.stderr)
    sys.exit(1)
