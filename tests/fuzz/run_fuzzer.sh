#!/bin/sh
# Builds a fuzz target (wire: the wire header parser; door: the front door's pre-handshake
# frames) with clang's libFuzzer and runs it for a while (default 30 s) on its corpus.
# Exit 77 (skipped) when clang or its fuzzer runtime is absent.
set -eu
src=$1; target=$2; corpus=$3; secs=${4:-30}
command -v clang++ >/dev/null 2>&1 || { echo "clang++ not found: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I"$src/lib" \
     "$src/tests/fuzz/${target}_fuzz.cpp" "$src/lib/wire/${target}.cpp" -o "$work/fuzz" 2>"$work/build.log"; then
  cat "$work/build.log"
  echo "cannot build with -fsanitize=fuzzer: skipped"
  exit 77
fi
cp -r "$corpus" "$work/corpus"
exec "$work/fuzz" -max_total_time="$secs" -seed=20261129 -print_final_stats=1 "$work/corpus"
