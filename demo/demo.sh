#!/usr/bin/env bash
# The softnic demo: two network namespaces joined by a veth pair, a softnic
# server in one and a client in the other, running an ibv_rc_pingpong-style
# ping-pong and a perftest-style write_bw over AF_XDP. Everything it creates
# is removed on exit, also on failure or Ctrl-C. Needs root.
set -euo pipefail

SOFTNIC=${SOFTNIC:-bin/softnic}
MTU=${MTU:-9000}
NS_A=softnic-demo-a NS_B=softnic-demo-b
IF_A=sndemo0 IF_B=sndemo1
ADDR_A=10.88.0.1 ADDR_B=10.88.0.2

if [ "$(id -u)" -ne 0 ]; then
	echo "demo: needs root (network namespaces, XDP and AF_XDP)" >&2
	exit 1
fi
[ -x "$SOFTNIC" ] || { echo "demo: $SOFTNIC not built (run make build)" >&2; exit 1; }

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	ip netns del "$NS_A" 2>/dev/null || true
	ip netns del "$NS_B" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
cleanup

# One queue per CPU, as a NIC has: softnic runs one engine per queue.
QUEUES=$(nproc)
echo "== topology: $NS_A/$IF_A ($ADDR_A) <-- veth, MTU $MTU, $QUEUES queues --> $NS_B/$IF_B ($ADDR_B)"
ip netns add "$NS_A"
ip netns add "$NS_B"
ip link add "$IF_A" netns "$NS_A" mtu "$MTU" numtxqueues "$QUEUES" numrxqueues "$QUEUES" type veth \
	peer name "$IF_B" netns "$NS_B" mtu "$MTU" numtxqueues "$QUEUES" numrxqueues "$QUEUES"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "$IF_A"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "$IF_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$IF_A" up
ip -n "$NS_B" link set "$IF_B" up

in_a() { ip netns exec "$NS_A" "$@"; }
in_b() { ip netns exec "$NS_B" "$@"; }

echo
echo "== softnic devinfo -d $IF_A"
in_a "$SOFTNIC" devinfo -d "$IF_A" || true

# GID index 1 is the interface's IPv4 address (0 is the MAC-derived link-local GID).
run_pair() {
	local name=$1; shift
	echo
	echo "== $name: server in $NS_A, client in $NS_B"
	local log
	log=$(mktemp)
	in_a "$SOFTNIC" "$@" -d "$IF_A" >"$log" 2>&1 &
	local server=$!
	pids+=("$server")
	in_b "$SOFTNIC" "$@" -d "$IF_B" -connect-wait 5s "$ADDR_A"
	wait "$server"
	echo "-- server side:"
	cat "$log"
	rm -f "$log"
}

run_pair "RC ping-pong, 4 KiB messages, IB MTU 1024 (ibv_rc_pingpong-compatible)" \
	pingpong -g 1 -m 1024 -s 4096 -n 1000
run_pair "RDMA WRITE bandwidth, 64 KiB messages, IB MTU 4096 (ib_write_bw-compatible)" \
	perf write_bw -x 1 -m 4096 -s 65536 -n 5000
run_pair "RDMA WRITE bandwidth over 64 QPs, spread over the engines (ib_write_bw -q 64)" \
	perf write_bw -x 1 -m 4096 -s 65536 -q 64 -n 500

# Debian's own ib_write_bw, unmodified, as user nobody: a softnic daemon on
# each end publishes its device, and softnic exec points libibverbs at it
# and at the C provider found next to the binary. Both are copied where
# nobody may run them (the checkout may be private to root).
stock_pair() {
	if ! command -v ib_write_bw >/dev/null || ! command -v setpriv >/dev/null; then
		echo
		echo "== (Debian's ib_write_bw: not installed; apt-get install perftest to see it run on softnic)"
		return
	fi
	local dir daemons=()
	dir=$(mktemp -d)
	chmod 755 "$dir"
	mkdir -m 755 "$dir/run"
	cp "$SOFTNIC" "$(dirname "$SOFTNIC")/libsoftnic-rdmav34.so" "$dir/"
	echo
	echo "== softnic daemon on $IF_A and on $IF_B; Debian's ib_write_bw as user nobody through softnic exec"
	# Not through in_a/in_b: $! must be the daemon (ip netns exec execs it), not a subshell.
	ip netns exec "$NS_A" "$dir/softnic" daemon -d "$IF_A" --run-dir "$dir/run" --log-level warn &
	daemons+=($!)
	ip netns exec "$NS_B" "$dir/softnic" daemon -d "$IF_B" --run-dir "$dir/run" --log-level warn &
	daemons+=($!)
	pids+=("${daemons[@]}")
	for _ in $(seq 200); do
		[ -S "$dir/run/softnic_$IF_A.sock" ] && [ -S "$dir/run/softnic_$IF_B.sock" ] && break
		sleep 0.05
	done
	local nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups "$dir/softnic" exec --run-dir "$dir/run")
	in_a "${nobody[@]}" -d "$IF_A" -- ib_write_bw -x 1 -m 4096 -n 5000 >"$dir/server.log" 2>&1 &
	local server=$!
	pids+=("$server")
	for _ in $(seq 200); do
		in_a ss -Hltn 'sport = :18515' | grep -q . && break
		sleep 0.05
	done
	echo "\$ softnic exec -d $IF_B -- ib_write_bw -x 1 -m 4096 -n 5000 $ADDR_A"
	if ! in_b "${nobody[@]}" -d "$IF_B" -- ib_write_bw -x 1 -m 4096 -n 5000 "$ADDR_A"; then
		echo "-- server side:"
		cat "$dir/server.log"
		return 1
	fi
	wait "$server"
	kill "${daemons[@]}"
	wait "${daemons[@]}" || true
	rm -rf "$dir"
}
stock_pair

echo
echo "== demo done; removing the namespaces"
