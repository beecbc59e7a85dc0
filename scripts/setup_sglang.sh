#!/usr/bin/env bash
# Idempotent set-up of .venv-sglang: SGLang 0.5.23's real server on CPU, for the real-SGLang test tier
# (tests/sglang_real/) and the CPU contender of bench/bench_engine.py. About 3.5 GB; ~4 minutes plus downloads.
#
# Everything comes from the package index except SGLang's CPU kernel package, which PyPI does not build: its
# wheel, the tested versions and a torchvision patch lie in the folder AGENTRL_SGLANG_CPU names (default below)
# (docs/engines.md#sglangs-cpu-kernel-wheel says how to rebuild the wheel).
#
# Exit status: 0 when the venv is ready; 3 when this machine cannot run it (no kernel wheel for this Python, a
# CPU without AVX-512, no libnuma): the real-SGLang tests then skip, naming the reason. Under CI=true this
# script fails instead, and so do the tests (never a silent skip in CI), unless AGENTRL_REQUIRE_SGLANG_REAL=0
# says explicitly that this CI machine cannot run the tier. One reason is not a set-up failure even in CI: a CPU
# without AVX-512 (the kernels are written for it; no script can fix the hardware). Then the tier skips in CI
# too, naming the CPU, and scripts/test.sh prints it in its closing lines.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${AGENTRL_SGLANG_CPU:-../shared/sglang-cpu}
VENV=${AGENTRL_SGLANG_VENV:-.venv-sglang}  # the tests point it elsewhere
PY=${PYTHON_SGLANG:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

cannot() {  # the machine cannot run the real server: say why and how to fix it ($2=hardware: no fix here)
  echo "[setup_sglang] cannot build $VENV: $1" >&2
  if [ "${CI:-}" = "true" ] && [ "${AGENTRL_REQUIRE_SGLANG_REAL:-1}" != "0" ] && [ "${2:-}" != "hardware" ]; then
    echo "[setup_sglang] CI=true: the real-SGLang tier must run; failing (on a machine known not to run it, set" \
      "AGENTRL_REQUIRE_SGLANG_REAL=0 to skip the tier, with this reason in the test summary)" >&2
    exit 1
  fi
  echo "[setup_sglang] the real-SGLang tests (tests/sglang_real/test_live_*.py) will be skipped" >&2
  mkdir -p "$VENV" && printf '%s\n' "$1" > "$VENV/.agentrl-sglang-unavailable"  # the tests' skip reason
  if [ "${2:-}" = "hardware" ]; then touch "$VENV/.agentrl-sglang-unavailable-hardware"; fi
  exit 3
}

rm -f "$VENV/.agentrl-sglang-unavailable" "$VENV/.agentrl-sglang-unavailable-hardware"  # a reason of an earlier run
wheel=$(ls "$SRC"/sglang_kernel_cpu-*.whl 2>/dev/null | head -n 1 || true)
[ -n "$wheel" ] || cannot "no sglang_kernel_cpu-*.whl in $SRC (set AGENTRL_SGLANG_CPU to the folder holding it)"
py_tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
case "$(basename "$wheel")" in
  *-"$py_tag"-"$py_tag"-linux_x86_64.whl) ;;
  *) cannot "the kernel wheel $(basename "$wheel") does not fit $PY ($py_tag, $(uname -m)). Rebuild it for this
  Python from SGLang's python/sglang/kernels/aot (tag v0.5.23) as $SRC/README.md 'Rebuilding the kernel' says
  (~13 minutes on 2 cores), put the wheel in a folder with deps.txt, versions.txt and patch_torchvision.py, and
  point AGENTRL_SGLANG_CPU at it; or set PYTHON_SGLANG to a Python 3.11";;
esac

# The kernel wheel's code uses AVX-512 (with bf16) unconditionally: on a CPU without it, `import sgl_kernel`
# (and so the server) dies with SIGILL. Checked first, before 3.5 GB of installs.
missing=$(for flag in avx512f avx512bw avx512vl avx512_bf16; do
  grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' | grep -qx "$flag" || printf '%s ' "$flag"; done)
if [ -n "$missing" ]; then
  cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
  cannot "this CPU (${cpu:-unknown}) lacks ${missing% }: the kernel wheel in $SRC is built for x86-64 with
  AVX-512 and avx512_bf16 and dies with SIGILL on import here. SGLang's CPU kernels are written for AVX-512
  (rebuilding on this CPU, $SRC/README.md 'Rebuilding the kernel', does not remove that); run the live tier on
  a machine with those flags" hardware
fi

if ! ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\b' || ! command -v numactl >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup_sglang] installing libnuma-dev and numactl (SGLang's CPU kernels link libnuma)"
    apt-get install -y -q libnuma-dev numactl >/dev/null
  else
    cannot "libnuma and numactl are missing; install them: sudo apt-get install -y libnuma-dev numactl"
  fi
fi

stamp=$VENV/.agentrl-sglang-installed
fresh=1
[ -f "$stamp" ] || fresh=0
for input in scripts/setup_sglang.sh "$wheel" "$SRC/deps.txt" "$SRC/versions.txt" "$SRC/patch_torchvision.py"; do
  [ "$fresh" = 1 ] && [ "$input" -nt "$stamp" ] && fresh=0
done
# On a CPU with AMX, SGLang's server sends its forward through these kernels, whose RMSNorm has no float32
# ('"rmsnorm_kernel" not implemented for Float'): the float32 server the live tier starts dies at its first forward.
float32_probe() {
  if grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -qw amx_tile && ! "$VENV/bin/python" -c \
    "import torch, sgl_kernel; torch.ops.sgl_kernel.rmsnorm_cpu(torch.randn(2, 64), torch.ones(64), 1e-6)" 2>/dev/null; then
    rm -f "$stamp"
    cannot "on this CPU (AMX) SGLang's CPU kernels have no float32 RMSNorm, so the float32 server the live tier starts dies at its first forward" hardware
  fi
}
if [ "$fresh" = 1 ]; then
  float32_probe
  echo "[setup_sglang] $VENV ready (stamp $stamp)"
  exit 0
fi

started=$(date +%s)
[ -x "$VENV/bin/python" ] || { echo "[setup_sglang] creating $VENV with $PY"; "$PY" -m venv "$VENV"; }
pip=("$VENV/bin/pip" install -q)
# versions.txt: every version of the venv that was tested (it pins torch==2.13.0+cpu: sglang 0.5.23's own pin is
# a CUDA torch, and the kernel wheel is linked against this CPU one).
constraints=("-c" "$SRC/versions.txt")
echo "[setup_sglang] installing torch (CPU) and SGLang's requirements ($SRC/deps.txt)"
"${pip[@]}" "${constraints[@]}" torch
"${pip[@]}" "${constraints[@]}" -r "$SRC/deps.txt"
# --no-deps: sglang's own requirements name CUDA packages (and a CUDA torch); deps.txt is them minus those.
# triton: `import sglang` needs it although no kernel of it runs on CPU.
"${pip[@]}" "${constraints[@]}" --no-deps sglang torchvision triton
"$VENV/bin/python" "$SRC/patch_torchvision.py"
"${pip[@]}" --no-deps --force-reinstall "$wheel"
SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c "import sglang.srt.entrypoints.http_server, sgl_kernel, sglang.benchmark.serving" \
  || cannot "the installed SGLang does not import (see the error above); compare $VENV with $SRC/versions.txt"
float32_probe
rm -f "$VENV/.agentrl-sglang-unavailable"
touch "$stamp"
echo "[setup_sglang] $VENV ready in $(( $(date +%s) - started )) s"
