"""onnxcomp: compress the activations an ONNX Runtime training graph stashes for backward."""
import os as _os

__version__ = "0.1.0"
# The protobuf implementation the user's environment asked for, read before anything onnxcomp imports can change it:
# importing onnxruntime_extensions sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in os.environ (its cvt module),
# and a measurement child started afterwards then parsed its graph with pure-Python protobuf: +2.2 MiB of set-up RSS
# on a 304-node graph, growing with the node count (runtime/measure.py restores this; docs/notes/setupfree.md).
USER_PROTOBUF_IMPLEMENTATION = _os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION")


def __getattr__(name: str):  # noqa: ANN202  (lazy: `import onnxcomp` stays free of torch and onnxruntime)
    if name == "from_torch":
        from .user_model import from_torch

        return from_torch
    raise AttributeError(f"module 'onnxcomp' has no attribute {name!r}")
