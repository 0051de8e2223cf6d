"""onnxcomp: compress the activations an ONNX Runtime training graph stashes for backward."""
__version__ = "0.1.0"
