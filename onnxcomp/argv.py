"""Command-line quirks argparse gets wrong for us."""
from __future__ import annotations

import argparse


def _options(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """(every option string of the parser and its subcommands, those that take one value)."""
    every, valued = set(), set()
    for action in parser._actions:  # argparse has no public walk over its actions
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                e, v = _options(sub)
                every |= e
                valued |= v
            continue
        every.update(action.option_strings)
        if action.option_strings and action.nargs is None:
            valued.update(action.option_strings)
    return every, valued


def glue_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--budget -5MiB`` -> ``--budget=-5MiB``: argparse reads a value starting with '-' as an option and
    says only "expected one argument"; glued, the option's own type check reports what is wrong with it."""
    every, valued = _options(parser)
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if tok.startswith("--") and tok in valued and nxt is not None and nxt.startswith("-") and nxt not in every and \
                nxt.split("=", 1)[0] not in every and nxt != "--":
            out.append(f"{tok}={nxt}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out
