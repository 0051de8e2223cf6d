"""Subcommands built on the rewrite passes: transform, train, demo."""
from __future__ import annotations
