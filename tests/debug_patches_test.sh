#!/bin/sh
# The instrumentation patches in scripts/debug/ (docs/performance.md cites their results) must
# still apply to the tree: a patch that no longer applies is a reproduction recipe that lies.
# Exit 77 (skipped) when git is absent.
set -eu
src=$1
command -v git >/dev/null 2>&1 || { echo "git not found: skipped"; exit 77; }
cd "$src"
status=0
for p in scripts/debug/*.patch; do
  if git apply --check "$p"; then
    echo "applies: $p"
  else
    echo "DOES NOT APPLY: $p (re-make it against the current tree)"
    status=1
  fi
done
exit $status
