#!/usr/bin/env bash
# Freeze the code a cluster sweep runs: build a wheel of this checkout and unpack it into a snapshot
# directory, then print the line that makes both the submitting process and the jobs import it.
# Later edits to the checkout (or a `git pull`) cannot change jobs that are still queued.
#
#   eval "$(launch/snapshot.sh)"            # puts the snapshot first on PYTHONPATH in this shell
#   embodirl-train -m --config-dir launch +site=example seed='range(0,5)'
#
# Usage: launch/snapshot.sh [DEST]  (default: $SCRATCH/embodirl-snapshots, else ~/embodirl-snapshots)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-${SCRATCH:-$HOME}/embodirl-snapshots}"
commit="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo nogit)"
if [ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ]; then
  echo "snapshot.sh: note: uncommitted changes are included in the snapshot" >&2
fi
snap="$dest/$commit-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$snap/wheel"
python -m pip wheel --quiet --no-deps --wheel-dir "$snap/wheel" "$repo" >&2
python -m pip install --quiet --no-deps --target "$snap/site" "$snap"/wheel/*.whl >&2
echo "snapshot.sh: code frozen in $snap/site" >&2
echo "export PYTHONPATH=$snap/site\${PYTHONPATH:+:\$PYTHONPATH}"
