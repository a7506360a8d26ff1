#!/usr/bin/env bash
# Build the standalone one-folder app: dist/fatstudio/, whose dist/fatstudio/fatstudio is the `fatstudio`
# command (no arguments: the window). Run from a clone: bash packaging/build.sh
#
# Makes (or reuses) its own environment build/pyinstaller-env with torch (the CPU build), fatstudio and
# PyInstaller, then runs packaging/fatstudio.spec. Environment variables:
#   PYTHON           the Python to build with (default python3; 3.11 or newer with venv)
#   TORCH_INDEX_URL  where to get torch from, e.g. https://download.pytorch.org/whl/cpu on a machine where plain
#                    `pip install torch` would bring the CUDA build (Linux x86_64 from PyPI)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
ENV="$ROOT/build/pyinstaller-env"
TORCH_VERSION=2.13.0
PYINSTALLER_VERSION=">=6.10,<7"
start=$(date +%s)

if [ ! -x "$ENV/bin/python" ]; then
    echo "== creating the build environment $ENV"
    "${PYTHON:-python3}" -m venv "$ENV"
else
    echo "== reusing the build environment $ENV"
fi
PY="$ENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check -q)

echo "== installing torch==$TORCH_VERSION (CPU), fatstudio and PyInstaller"
if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "${PIP[@]}" install "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
else
    "${PIP[@]}" install "torch==$TORCH_VERSION"
fi
"${PIP[@]}" install "pyinstaller$PYINSTALLER_VERSION" "$ROOT"
if [ "$("$PY" -c 'import torch; print(torch.version.cuda is not None)')" = True ]; then
    echo "warning: this torch is a CUDA build; the bundle will be several GB. Set TORCH_INDEX_URL to a CPU index" \
         "(e.g. https://download.pytorch.org/whl/cpu) and delete $ENV to rebuild it." >&2
fi

echo "== running PyInstaller (packaging/fatstudio.spec)"
"$PY" -m PyInstaller --noconfirm --log-level WARN \
    --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" "$ROOT/packaging/fatstudio.spec"

# The icon beside the executable, and a desktop entry that points into this bundle (copy it to
# ~/.local/share/applications/ to get fatstudio in the desktop's menu).
BUNDLE="$ROOT/dist/fatstudio"
cp "$ROOT/resources/fatstudio.png" "$ROOT/resources/fatstudio.svg" "$BUNDLE/"
sed -e "s|^Exec=.*|Exec=\"$BUNDLE/fatstudio\"|" -e "s|^Icon=.*|Icon=$BUNDLE/fatstudio.png|" \
    "$ROOT/packaging/fatstudio.desktop" > "$BUNDLE/fatstudio.desktop"

end=$(date +%s)
echo "== built $BUNDLE/fatstudio"
echo "size: $(du -sh "$BUNDLE" | cut -f1)   build time: $((end - start)) s"
echo "try: $BUNDLE/fatstudio --self-test"
