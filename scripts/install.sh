#!/usr/bin/env bash
# Install indexed-trainer (or any requirement) into a Python environment with the tested releases of
# constraints.txt, saying what it installs and showing pip's progress.
#
#   scripts/install.sh PYTHON REQUIREMENT...     e.g. scripts/install.sh .venv/bin/python '.[worker]'
#
# PyTorch comes from TORCH_INDEX_URL when that index answers (default: the CPU-only builds, ~200 MB instead
# of a CUDA build's ~5 GB), else from the package registry (on Linux x86_64 a CUDA build, which also runs on
# CPUs). TORCH_INDEX_URL='' always takes the registry's build; .../whl/cu126 a CUDA one. PIP_FIND_LINKS (a
# folder of wheels) and the other PIP_* variables work as usual. Before PyTorch downloads, one line says which
# build pip chose and how much it downloads (torch_download.py beside this script, from pip's dry run).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The constraints file sits at the root of a checkout, or beside this script (the Dockerfile copies both).
constraints="$(dirname "$here")/constraints.txt"
[[ -f "$constraints" ]] || constraints="$here/constraints.txt"
name="$(basename "$0")"
say() { printf '%s: %s\n' "$name" "$*" >&2; }

[[ $# -ge 2 ]] || { say "usage: $name PYTHON REQUIREMENT..."; exit 2; }
python="$1"
shift
[[ -f "$constraints" ]] || { say "error: constraints.txt not found beside $here"; exit 2; }

pinned() { sed -n "s/^$1==//p" "$constraints"; }
pip=("$python" -m pip install --progress-bar on --constraint "$constraints")

# PyTorch is wanted by the [worker] or [lightning] extra, or by a requirements file that pins it (the
# Dockerfile's -r).
wants_torch=false
for requirement in "$@"; do
  if [[ "$requirement" =~ \[([^]]*,)?(worker|lightning)(,[^]]*)?\]$ ]] ||
    { [[ -f "$requirement" ]] && grep -q '^torch==' "$requirement"; }; then
    wants_torch=true
  fi
done
# Already there at the pinned release (any build: +cpu, +cu126): nothing to choose.
has_pinned_torch() {
  "$python" -c 'import sys
from importlib.metadata import PackageNotFoundError, version
try:
    sys.exit(version("torch").split("+")[0] != sys.argv[1])
except PackageNotFoundError:
    sys.exit(1)' "$(pinned torch)" 2>/dev/null
}
# One line before PyTorch downloads: the build pip resolves for the pinned torch/torchvision with these options
# (pip's dry run, nothing downloaded to measure) and its size; where that fails, the general words, and on.
announce_torch() {  # WHERE GENERAL-WORDS [PIP-OPTION...]
  local where="$1" general="$2" line
  shift 2
  if line="$("$python" "$here/torch_download.py" "$where" --constraint "$constraints" "$@" \
    "torch==$(pinned torch)" "torchvision==$(pinned torchvision)" 2>/dev/null)"; then
    say "$line"
  else
    say "installing PyTorch $(pinned torch) from $where ${general%)}${line:+; ${line:0:300}})"
  fi
}
if [[ "$wants_torch" == true ]] && ! has_pinned_torch; then
  index="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
  if [[ -n "$index" ]] && "$python" - "$index" <<'PROBE' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10).close()
PROBE
    announce_torch "$index" "(a few hundred MB)" --index-url "$index"
    "${pip[@]}" --index-url "$index" "torch==$(pinned torch)" "torchvision==$(pinned torchvision)"
  else
    [[ -n "$index" ]] && say "$index does not answer: taking PyTorch from the package registry instead"
    announce_torch "the package registry" "(on Linux x86_64 a CUDA build: several GB, minutes)"
  fi
fi
say "installing $* with the tested releases of $constraints"
"${pip[@]}" "$@"
