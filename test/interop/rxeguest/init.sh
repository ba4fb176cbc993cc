#!/bin/sh
# /init of the rxeguest initramfs: set up rxe0 on eth0, run /script.sh with
# its output on the second serial port, report its exit status, power off.
export PATH=/usr/bin:/bin
export HOME=/root
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /tmp /run /root
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
OUT=/dev/ttyS1

finish() {
	printf '\n@@RXEGUEST-EXIT %s\n' "$1" >$OUT
	poweroff -f
	sleep 10
}

fail() {
	echo "rxeguest: setup failed: $*"
	echo "rxeguest: setup failed: $*" >$OUT
	finish 255
}

# Debian's busybox runs its own applets before searching PATH; make ip
# and tc mean iproute2's (netem, rdma-aware) tools here and in the script.
cat >/etc/prelude.sh <<'PRELUDE'
ip() { /usr/bin/ip "$@"; }
tc() { /usr/bin/tc "$@"; }
PRELUDE
. /etc/prelude.sh
. /etc/guest.env
hostname "${GUEST_NAME:-rxeguest}"

while read -r mod; do
	insmod "/lib/modules/rxeguest/$mod.ko" || fail "insmod $mod"
done </lib/modules/rxeguest/order

ip link set lo up || fail "lo up"
if [ -n "$GUEST_ADDR" ]; then
	[ -e /sys/class/net/eth0 ] || fail "no eth0"
	# No IPv6 on eth0: a link-local address whose event the RDMA core
	# takes before the IPv4 one's would take GID index 1, which the tests
	# give for the IPv4 address (-g 1, -x 1).
	echo 1 >/proc/sys/net/ipv6/conf/eth0/disable_ipv6 || fail "eth0 without IPv6"
	ip link set eth0 mtu "${GUEST_MTU:-1500}" up || fail "eth0 up"
	ip addr add "$GUEST_ADDR" dev eth0 || fail "eth0 address $GUEST_ADDR"
	if [ -n "$GUEST_NETEM" ]; then
		# netem impairs the data path; the CM's MADs (RoCEv2 to QP 1: BTH's
		# DestQP is bytes 33-35 of an IPv4 packet without options) take an
		# unimpaired band. Linux's CM stops resending a DREQ when the
		# application destroys its ID, so a lost one leaves the peer's
		# rping waiting for a disconnect that never comes.
		tc qdisc add dev eth0 root handle 1: prio bands 2 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 ||
			fail "prio qdisc"
		tc qdisc add dev eth0 parent 1:2 handle 20: netem $GUEST_NETEM || fail "netem $GUEST_NETEM"
		tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff \
			match ip dport 4791 0xffff match u32 0x00000001 0x00ffffff at 32 flowid 1:1 ||
			fail "CM MAD filter"
	fi
	rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
	# rxe0's port follows eth0's carrier; wait until it is usable.
	i=0
	until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
		i=$((i + 1))
		[ $i -gt 100 ] && fail "rxe0 port not ACTIVE: $(cat /sys/class/infiniband/rxe0/ports/1/state)"
		sleep 0.1
	done
	# The GID table fills from a work queue after the port is up: wait for
	# the address at index 1 (index 0 is the default GID, from the MAC).
	set -- $(echo "${GUEST_ADDR%/*}" | tr . ' ')
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4")
	i=0
	until [ "$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)" = "$want" ]; do
		i=$((i + 1))
		[ $i -gt 100 ] && fail "rxe0 GID 1 is not $want: $(cat /sys/class/infiniband/rxe0/ports/1/gids/0 /sys/class/infiniband/rxe0/ports/1/gids/1 2>&1)"
		sleep 0.1
	done
	echo "rxeguest: rxe0 up on eth0 $GUEST_ADDR"
fi

if [ -n "$GUEST_WATCH_TX" ]; then
	/bin/txwatch &
fi

if [ -n "$GUEST_TIMEOUT" ]; then
	# Watchdog: report what every process waits on, then give up.
	(
		sleep "$GUEST_TIMEOUT"
		# Kernel threads (no command line) are left out: the report ends
		# up in a log's tail, where the hung tool must show.
		echo "rxeguest: script timed out after ${GUEST_TIMEOUT}s; eth0 rx_packets $(cat /sys/class/net/eth0/statistics/rx_packets 2>/dev/null) tx_packets $(cat /sys/class/net/eth0/statistics/tx_packets 2>/dev/null); processes (pid comm wchan cmdline):"
		for p in /proc/[0-9]*; do
			cmd=$(tr '\0' ' ' <$p/cmdline 2>/dev/null)
			[ -n "$cmd" ] || continue
			echo "${p#/proc/} $(cat $p/comm 2>/dev/null) $(cat $p/wchan 2>/dev/null) $cmd"
		done
		finish 124
	) >$OUT 2>&1 &
fi

cd /tmp
sh -c '. /etc/prelude.sh; . /script.sh' </dev/null >$OUT 2>&1
finish $?
