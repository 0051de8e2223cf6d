import sys, importlib, numpy as np
import llvmlite.binding as llvm
llvm.set_option('', '-pass-remarks-missed=.*')
llvm.set_option('', '-pass-remarks-analysis=.*')
llvm.set_option('', '-pass-remarks=loop-vectorize')
sys.path.insert(0, '/tmp/zfp16c')
m = importlib.import_module(sys.argv[1])
S = np.zeros(m._ROWS * m.G, np.int32)
m._front2d(S, 100, np.int32(27), np.int32(109), 9, 149)
