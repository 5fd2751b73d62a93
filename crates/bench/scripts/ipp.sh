#!/bin/sh
# Instructions per packet of the pipeline worker thread, free-running, under
# callgrind: ipp.sh BINARY CASE [SECONDS]  (CASE: source-sink | port-inc-out)
# Prints the worker thread's instructions / the packets it handled in all.
B=$1; C=$2; S=${3:-1}
D=$(mktemp -d /tmp/ipp.XXXXXX)
out=$(valgrind --tool=callgrind --separate-threads=yes $VG --callgrind-out-file=$D/cg.%p \
  "$B" pipeline --case "$C" --seconds "$S" 2>/dev/null)
pk=$(echo "$out" | sed -n 's/.* \([0-9]*\) packets in all/\1/p')
# The worker is the thread with the most instructions.
ins=$(cat $D/cg.*-* | sed -n 's/^totals: //p' | sort -n | tail -1)
echo "$C $B instructions $ins packets $pk per-packet $(echo "scale=2; $ins / $pk" | bc)"
[ -n "$KEEP" ] || rm -rf "$D"
[ -z "$KEEP" ] || echo "kept $D"
