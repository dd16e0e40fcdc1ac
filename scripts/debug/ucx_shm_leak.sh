#!/bin/bash
# Runs scripts/debug/ucx_shm_leak.cpp (see its header): builds it into a temporary directory,
# starts the server, a client, stops the client (or not, with --no-stop) and kills it, and
# prints what the server saw.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -O1 -std=c++20 "$here/ucx_shm_leak.cpp" -o "$work/leak" -lucp -lucs
port=$((20000 + RANDOM % 10000))
"$work/leak" server $port 2> "$work/server.err" > /dev/null &
server=$!
sleep 0.5
"$work/leak" client $port > /dev/null 2>&1 &
client=$!
sleep 0.5
if [ "${1:-}" != "--no-stop" ]; then kill -STOP $client; sleep 0.5; fi
kill -KILL $client
wait $server || true
cat "$work/server.err"
