#!/usr/bin/env bash
# The GPU check in one script, on a machine with a CUDA GPU and posenc installed as the README
# says: the device and versions, the GPU tests (`pytest -m gpu`: every encoding against the
# CPU, compiled FlexAttention and CoPE's fused kernel against the default paths), then the
# GPT-2-small benchmark of docs/performance.md with the default kernels and with
# train.attention=flex. Extra arguments go to both benchmarks (e.g. 'bench.encodings=[none,cope]').
# Everything printed is also written under ${OUT:-outputs/gpu_check}.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-outputs/gpu_check}"
mkdir -p "$out"
{
    date -u +%Y-%m-%dT%H:%MZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python -c "import torch, triton; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'triton', triton.__version__)"
} | tee "$out/device.txt"
python -m pytest -m gpu -q -p no:randomly -n 0 tests/gpu 2>&1 | tee "$out/pytest_gpu.txt" ||
    echo "some GPU tests failed: $out/pytest_gpu.txt (the benchmark runs anyway)"
for attention in sdpa flex; do
    posenc bench bench.device=cuda model=gpt2_small bench.context_length=1024 bench.batch_size=8 \
        bench.precision=bf16 'bench.eval_factors=[4,32]' bench.threads=4 \
        bench.attention="$attention" hydra.run.dir="$out/bench_$attention" "$@" \
        2>&1 | tee "$out/bench_$attention.txt"
done
