"""onnxcomp: compress the activations an ONNX Runtime training graph stashes for backward."""
__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202  (lazy: `import onnxcomp` stays free of torch and onnxruntime)
    if name == "from_torch":
        from .user_model import from_torch

        return from_torch
    raise AttributeError(f"module 'onnxcomp' has no attribute {name!r}")
