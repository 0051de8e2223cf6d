"""User-facing errors: the CLI prints them as one line and exits with code 2."""


class OnnxcompError(Exception):
    """A problem with the user's input or environment, phrased as what/where/how to fix."""

    exit_code = 2
