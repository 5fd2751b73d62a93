#!/bin/bash
# Alternated A/B of `nfkit-bench pipeline --case C --seconds S` over binaries:
#   ab.sh [-n RUNS] [-s SECONDS] NAME=BINARY...   (default 5 runs, 2 s)
# The cycles figure of issues 13/15 (base 50e8956 vs head):
#   crates/bench/scripts/ab.sh base=/path/to/base/nfkit-bench head=target/release/nfkit-bench
# Prints per binary and case the cycles/packet of every run, the median and the min.
n=5; s=2
while getopts n:s: o; do case $o in n) n=$OPTARG;; s) s=$OPTARG;; *) exit 2;; esac; done
shift $((OPTIND-1))
declare -A r
for i in $(seq "$n"); do
  for nb in "$@"; do
    name=${nb%%=*}; bin=${nb#*=}
    while read -r c _ _ cyc _; do
      r[$name/${c%:}]+="$cyc "
    done < <("$bin" pipeline --case source-sink --case port-inc-out --seconds "$s")
  done
done
for k in $(printf '%s\n' "${!r[@]}" | sort); do
  v=${r[$k]}
  med=$(tr ' ' '\n' <<<"$v" | grep . | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  min=$(tr ' ' '\n' <<<"$v" | grep . | sort -n | head -1)
  printf '%-28s runs: %s median %s min %s\n' "$k" "$v" "$med" "$min"
done
