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


class OpError(OnnxcompError):
    """An onnxcomp custom op (PyOp) failed inside an ONNX Runtime run.

    The op itself never lets an exception escape (onnxruntime-extensions would abort the process); it
    records the failure, hands ORT well-formed outputs, and the training step raises this afterwards.
    ``others`` counts further op failures in the same step (only the first is described).
    """

    exit_code = 3

    def __init__(self, op_type: str, tensor: str | None, cause: str, others: int = 0) -> None:
        self.op_type, self.tensor, self.cause, self.others = op_type, tensor, cause, others
        where = f"tensor {tensor!r}" if tensor else "a tensor this graph does not name (re-run transform)"
        more = f" (and {others} more op failure(s) in the same step)" if others else ""
        super().__init__(f"{op_type} on {where} failed: {cause}; the step's outputs and gradients were "
                         f"discarded{more}")


class OutputExistsError(OnnxcompError):
    """An output the user did not allow to be replaced already exists (or another run is writing it).

    ``how`` is the remedy in the caller's words (an API keyword or a CLI flag)."""

    def __init__(self, path: object, what: str = "already exists", how: str = "pass force=True",
                 options: tuple[str, ...] = ()) -> None:
        self.path, self.what = path, what
        super().__init__(f"{path} {what}; {how} to replace it or choose another output", options=options)
