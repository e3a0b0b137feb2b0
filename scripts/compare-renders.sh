#!/usr/bin/env bash
# Render every values file of the tests' corpus, the defaults and the examples for each target with the code of
# REV and with the working tree, and compare the bytes (stdout, stderr and the exit code). For a refactoring
# that must not change a render:  scripts/compare-renders.sh main   (exit 1 when any render differs)
set -euo pipefail
rev="${1:?usage: scripts/compare-renders.sh REV [TARGET...]}"; shift
targets=("${@:-kubernetes}"); [[ $# -gt 0 ]] || targets=(kubernetes slurm)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$root/.venv/bin/python"; [[ -x "$python" ]] || python=python3
old="$(mktemp -d)"; out="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$old" >/dev/null 2>&1 || true; rm -rf "$old" "$out"' EXIT
git -C "$root" worktree add --quiet --detach "$old" "$rev"
render() {  # CODE_ROOT TARGET FILE -> stdout, stderr and the exit code in $out/<which>
  local code=0
  (cd "$out" && PYTHONPATH="$1" "$python" -m generator --target "$2" -f "$3") >"$out/$4.out" 2>"$out/$4.err" || code=$?
  echo "exit $code" >>"$out/$4.out"
}
count=0; differ=0
while IFS= read -r file; do
  for target in "${targets[@]}"; do
    render "$old" "$target" "$root/$file" old; render "$root" "$target" "$root/$file" new
    count=$((count + 1))
    if ! cmp -s "$out/old.out" "$out/new.out" || ! cmp -s "$out/old.err" "$out/new.err"; then
      differ=$((differ + 1)); echo "differs: --target $target -f $file"
    fi
  done
done < <(cd "$root" && ls tests/corpus/valid/* tests/corpus/invalid/* variables/variables.json examples/*/*.yaml 2>/dev/null)
echo "$count renders compared with $rev: $differ differ"
[[ $differ -eq 0 ]]
