# aotlossy scratch shim: main's editable install maps onnxcomp.custom_ops / onnxcomp.models to /work/main;
# point them at the worktree on PYTHONPATH instead.
try:
    import __editable___onnxcomp_0_1_0_finder as _f
    _f.MAPPING.update({"onnxcomp": "/work/wt/aotlossy/onnxcomp", "onnxcomp.custom_ops": "/work/wt/aotlossy/custom_ops",
                       "onnxcomp.models": "/work/wt/aotlossy/models"})
except ImportError:
    pass
