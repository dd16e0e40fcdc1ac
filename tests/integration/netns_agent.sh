#!/bin/sh
# A launch agent that plays several hosts on one machine, for tests: runs COMMAND (a shell
# command line, as ssh runs it on HOST) in the network namespace TEST_NETNS_HOSTS names for
# HOST, with that host's own boot id, so that UCX sees another machine there (shared memory
# only between ranks of one namespace).
#
#   TEST_NETNS_HOSTS="ADDR=NAMESPACE:BOOT_ID_FILE ..." netns_agent.sh HOST COMMAND...
host=$1
shift
for entry in $TEST_NETNS_HOSTS; do
  [ "${entry%%=*}" = "$host" ] || continue
  spec=${entry#*=}
  # ip netns exec gives the command a mount namespace of its own: the bind is its alone.
  exec ip netns exec "${spec%%:*}" sh -c 'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec sh -c "$1"' \
    "${spec#*:}" "$*"
done
echo "netns_agent: no namespace plays $host" >&2
exit 255
