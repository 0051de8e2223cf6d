"""Command-line entry point (filled in by the CLI module)."""
import sys


def main(argv: list[str] | None = None) -> int:
    print("onnxcomp: CLI not wired yet", file=sys.stderr)
    return 1
