"""User-facing errors: the CLI prints them as one line and exits with code 2."""
from __future__ import annotations

from collections.abc import Mapping


class OnnxcompError(Exception):
    """A problem with the user's input or environment, phrased as what/where/how to fix.

    A message about a library option names it as ``{option}`` and lists it in ``options``: the library
    renders it as ``option 'name'``, the command line as its flag (``render``), so library errors never
    speak of flags and CLI errors name the flag the user typed.
    """

    exit_code = 2

    def __init__(self, message: str, *, options: tuple[str, ...] = ()) -> None:
        self.template = message
        self.options = options
        super().__init__(self.render())

    def render(self, names: Mapping[str, str] | None = None) -> str:
        if not self.options:
            return self.template
        names = names or {}
        return self.template.format_map({o: names.get(o, repr(o)) for o in self.options})
