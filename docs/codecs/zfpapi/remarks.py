import sys, numpy as np
import llvmlite.binding as llvm
llvm.set_option('', '-pass-remarks-missed=loop-vectorize|slp-vectorizer')
llvm.set_option('', '-pass-remarks-analysis=.*')
llvm.set_option('', '-pass-remarks=loop-vectorize')
from onnxcomp.custom_ops import _zfp_numba as m
S = np.zeros(m._ROWS * m.G, np.int32)
fn = sys.argv[1]
if fn == "front":
    m._front2d(S, 100, np.int32(27), np.int32(109), 9, 149)
elif fn == "head":
    W = np.zeros(8 * m.G, np.int32)
    m._dec_head(S, W, 100, True, np.int32(27), np.int32(109), 9, 149)
