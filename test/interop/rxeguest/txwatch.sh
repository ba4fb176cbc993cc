#!/bin/sh
# /bin/txwatch of the rxeguest initramfs (Config.WatchTX): while eth0's
# device completes no frame (tx_packets) for 5 s, its qdisc keeps handing it
# more ("Sent", two frames or more): the device stopped taking them. Say so
# once, on the console (Guest.NICStalled), at KERN_ERR so that loglevel=4
# shows it. The variables let the host's test run it on stand-ins.
TC=${TXWATCH_TC:-/usr/bin/tc} # iproute2's: busybox's has no statistics
STATS=${TXWATCH_STATS:-/sys/class/net/eth0/statistics/tx_packets}
KMSG=${TXWATCH_KMSG:-/dev/kmsg}
INTERVAL=${TXWATCH_INTERVAL:-1}
completed_then=-1
handed_then=0
still=0
while sleep "$INTERVAL"; do
	# Completed first: a frame handed over between the two reads then
	# counts as handed and not yet completed, which the next look settles.
	completed=$(cat "$STATS")
	handed=$("$TC" -s qdisc show dev eth0 | awk '/Sent/ {print $4; exit}')
	handed=${handed:-0}
	if [ "$completed" != "$completed_then" ]; then
		completed_then=$completed
		handed_then=$handed
		still=0
	elif [ "$handed" -gt $((handed_then + 1)) ]; then
		still=$((still + 1))
	fi
	if [ $still -eq 5 ]; then
		echo "<3>rxeguest: eth0 transmit stalled: $((handed - handed_then)) frames handed to the device since it last completed one, 5 intervals ago" >>"$KMSG"
	fi
done
