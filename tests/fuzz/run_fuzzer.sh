#!/bin/sh
# Builds a fuzz target (wire: the wire header parser; door: the front door's pre-handshake
# frames; ucx_address: the UCX worker address validator, against the real UCX; stream: the stream
# transport's reader over a socketpair) with clang's
# libFuzzer and runs it for a while (default 30 s) on its corpus.
# Exit 77 (skipped) when clang or its fuzzer runtime is absent.
set -eu
src=$1; target=$2; corpus=$3; secs=${4:-30}
command -v clang++ >/dev/null 2>&1 || { echo "clang++ not found: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case "$target" in
  ucx_address)
    # The validator and UCX itself (its libraries are not instrumented; ASan sees the input).
    # What UCX leaks is UCX's (it does, on some failed connections): only the target's is a finding.
    sources="$src/lib/transport/ucx_address.cpp"
    flags=$(pkg-config --cflags --libs ucx absl_status absl_statusor absl_str_format)
    printf 'leak:libucs.so\nleak:libucp.so\nleak:libuct.so\n' > "$work/lsan.supp"
    export LSAN_OPTIONS="suppressions=$work/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" ;;
  stream)
    # The stream transport's reader over a socketpair, with libsodium for the sealed mode.
    sources="$src/lib/transport/stream.cpp $src/lib/transport/stream_conn.cpp $src/lib/transport/stream_writer.cpp
             $src/lib/transport/stream_crypto.cpp $src/lib/core/log.cpp $src/lib/core/net.cpp"
    flags=$(pkg-config --cflags --libs libsodium libcrypto absl_status absl_statusor absl_str_format) ;;
  *) sources="$src/lib/wire/${target}.cpp"; flags= ;;
esac
# shellcheck disable=SC2086 # $sources and $flags are word lists
if ! clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I"$src/lib" -I"$src/include" \
     "$src/tests/fuzz/${target}_fuzz.cpp" $sources $flags -o "$work/fuzz" 2>"$work/build.log"; then
  cat "$work/build.log"
  echo "cannot build with -fsanitize=fuzzer: skipped"
  exit 77
fi
cp -r "$corpus" "$work/corpus"
# A finding fails the test: libFuzzer's own exit code for one (77) is the one meson takes for "skipped".
exec "$work/fuzz" -max_total_time="$secs" -seed=20261129 -print_final_stats=1 -error_exitcode=1 "$work/corpus"
