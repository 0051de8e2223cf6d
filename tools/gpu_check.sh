#!/usr/bin/env bash
# Everything the GPU machine runs for issue 16, in one go (see docs/notes/gpu.md for how its figures were made):
#   tools/gpu_check.sh [tests] [sanitize] [bench] [ncu] [torch] [zfp]     (no argument: all but zfp)
# Writes logs under $OUT (or ./gpu_out). Assumes the GPU machine's Python (torch, CuPy, pytest, hypothesis);
# the project's pinned dependencies are not installed there, so the package is made importable by links.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
steps=${*:-tests sanitize bench ncu torch}
has() { [[ " $steps " == *" $1 "* ]]; }

# onnxcomp.custom_ops / onnxcomp.models live at the repo root (pyproject maps them): link them in place.
[ -e onnxcomp/custom_ops ] || ln -s ../custom_ops onnxcomp/custom_ops
[ -e onnxcomp/models ] || ln -s ../models onnxcomp/models
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1; then  # optional carried wheels (nvCOMP)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "import cupy, torch, numpy; print('cupy', cupy.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion(), 'torch', torch.__version__, 'numpy', numpy.__version__)"

rc=0
if has tests; then
  echo "== pytest -m gpu"
  files=$(ls tests/test_gpu_kernels.py tests/test_codecs_*.py tests/test_kernels_compile.py tests/test_torch*.py \
    2>/dev/null)
  python3 -m pytest -q -p no:cacheprovider -m gpu $files 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
if has sanitize; then
  echo "== compute-sanitizer memcheck: every decoder on valid and corrupt payloads"
  ONNXCOMP_CUPY_NO_POOL=1 ONNXCOMP_GPU_EXAMPLES=4 compute-sanitizer --tool memcheck --error-exitcode 86 \
    --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_kernels.py \
    -k "corrupt or sample_inputs or property" 2>&1 | tee "$OUT/sanitizer.txt" | tail -15
  echo "sanitizer exit code ${PIPESTATUS[0]}"
fi
if has zfp; then  # ZFP_TREE: another checkout (e.g. the zfpsuite branch) whose zfp GPU tests to run here
  echo "== zfp gpu tests in ${ZFP_TREE:-.}"
  (cd "${ZFP_TREE:-.}" && { [ -e onnxcomp/custom_ops ] || ln -s ../custom_ops onnxcomp/custom_ops; } \
    && { [ -e onnxcomp/models ] || ln -s ../models onnxcomp/models; } \
    && PYTHONPATH=$PWD python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_codecs_zfp.py) 2>&1 \
    | tee "$OUT/pytest_zfp.txt" | tail -20
fi
if has torch; then
  echo "== tools/bench_torch_gpu.py"
  timeout ${TORCH_TIMEOUT:-240} python3 tools/bench_torch_gpu.py ${TORCH_ARGS:-} --out "$OUT/bench_torch.json" 2>&1 | tee "$OUT/bench_torch.txt" \
    | tail -30
fi
if has bench; then
  echo "== tools/bench_gpu.py"
  timeout ${BENCH_TIMEOUT:-200} python3 tools/bench_gpu.py ${BENCH_ARGS:-} --acts acts --out "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.txt" \
    | tail -25
fi
if has ncu; then
  echo "== ncu on the codec kernels (64 MiB ReLU-like input)"
  ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy -k "regex:^(signbits|relumask|zvc|csr|dpr|sz|maxpool)" -c ${NCU_COUNT:-40} \
    python3 tools/bench_gpu.py --sizes 64 --once > "$OUT/ncu.txt" 2>&1
  grep -E "^  [a-z_0-9]+\(|Memory Throughput|DRAM Throughput|Duration|Registers Per|Achieved Occupancy" \
    "$OUT/ncu.txt" | head -120
fi
exit $rc
