"""The ``hista`` command line. Thin: parse options, call the library, print where
outputs went. Bad input exits with code 2 and a message naming the file, line and field.

:mod:`.main` holds the parser and :func:`main`; one module per command group holds its parsers
next to their handlers (:mod:`.data`: sample, models, tasks; :mod:`.sveb`: sveb, critic;
:mod:`.train`: train, verl; :mod:`.evaluate`: eval); :mod:`.options` the option types they share."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
