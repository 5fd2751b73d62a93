#!/bin/bash
# TinyNF's comparisons (OSDI'20 §6; issue 22, item 7) with `nfkit bench
# rfc2544`, in four parts, each into its own directory under OUT with its
# JSON, plots and summary.md:
#
#   vhost      fwd (both models) against DPDK testpmd (io, macswap), and the
#              six NFs in both models, over vhost-user: 64 B, 1518 B, IMIX at
#              1,024 flows; throughput and latency; the generator's
#              cross-check first
#   flows      the six NFs in both models over vhost-user, 64 B, 1 and
#              65,536 flows (1,024 is in `vhost`); throughput
#   veth       nfkit's NAT and bridge (both models) against the kernel's
#              (nftables masquerade, a Linux bridge; its IPv4 forwarding and
#              nfkit fwd as the baseline) on veth: 64 B, 1518 B, IMIX at
#              1,024 flows; throughput and latency
#   veth-flows NAT against the kernel's at 1 and 65,536 flows, 64 B
#
# Run as root (veths, namespaces, hugepages for testpmd) on a quiet
# machine with at least 2 cores, from the repository root, after
#   cargo build --release -p nfkit -p nfkit-bench
# with dpdk-testpmd (Debian's dpdk) and nft (Debian's nftables) installed:
#   docs/rfc2544/compare.sh [OUT]          (default OUT: rfc2544-compare)
# Trials default to 1 s x 1 repeat at 2% resolution, 0.1% loss bound, which
# fits the hour on 2 cores (RFC 2544's 5 s x 3 at 1% would take ~15x
# longer); TRIAL, REPEATS, RESOLUTION and CORES (tester,DUT) override.
set -u -o pipefail
OUT=${1:-rfc2544-compare}
NFKIT=${NFKIT:-target/release/nfkit}
TRIAL=${TRIAL:-1}
REPEATS=${REPEATS:-1}
RESOLUTION=${RESOLUTION:-2}
CORES=${CORES:-0,1}
common=(--trial "$TRIAL" --repeats "$REPEATS" --resolution "$RESOLUTION" --cores "${CORES%,*}" "${CORES#*,}")

nfs=()
for nf in nat bridge lb policer firewall router; do
	for m in agent queue; do nfs+=(--dut "nf:$nf@$m"); done
done

if [ ! -x "$NFKIT" ] || [ ! -x "$(dirname "$NFKIT")/nfkit-bench" ]; then
	echo "no $NFKIT or nfkit-bench beside it: cargo build --release -p nfkit -p nfkit-bench" >&2
	exit 2
fi
mkdir -p "$OUT"
log="$OUT/compare.log"
failed=()
part() {
	local name=$1
	shift
	echo "== $name: $(date -u +%T) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
	local t0=$SECONDS
	if nice -n -10 "$NFKIT" bench rfc2544 "${common[@]}" --out "$OUT/$name" "$@" 2>&1 | tee -a "$log"; then
		echo "== $name took $((SECONDS - t0)) s" | tee -a "$log"
	else
		echo "== $name FAILED after $((SECONDS - t0)) s (what was done is in $OUT/$name)" | tee -a "$log"
		failed+=("$name")
	fi
}

{
	echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), kernel $(uname -r)"
	echo "command: $0 $OUT (TRIAL=$TRIAL REPEATS=$REPEATS RESOLUTION=$RESOLUTION CORES=$CORES)"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
} | tee "$log"
start=$SECONDS

part vhost --cross-check --wiring vhost --size 64,1518,imix --flows 1024 --test throughput,latency \
	--dut fwd@queue --dut fwd@agent --dut testpmd:io --dut testpmd:macswap "${nfs[@]}"
part flows --wiring vhost --size 64 --flows 1,65536 --test throughput "${nfs[@]}"
part veth --wiring veth --size 64,1518,imix --flows 1024 --test throughput,latency \
	--dut nf:nat@agent --dut nf:nat@queue --dut kernel:nat \
	--dut nf:bridge@agent --dut nf:bridge@queue --dut kernel:bridge \
	--dut fwd@queue --dut kernel:forward
part veth-flows --wiring veth --size 64 --flows 1,65536 --test throughput \
	--dut nf:nat@agent --dut nf:nat@queue --dut kernel:nat

echo "== all parts: $((SECONDS - start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
for p in vhost flows veth veth-flows; do
	[ -f "$OUT/$p/summary.md" ] && { echo "### $p"; cat "$OUT/$p/summary.md"; } | tee -a "$OUT/summary.md"
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "failed parts: ${failed[*]}" | tee -a "$log"
	exit 1
fi
