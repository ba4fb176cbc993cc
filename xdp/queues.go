package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Which of an interface's queues hold an AF_XDP socket's buffer pool (the
// netdev family's queue-get, Linux 6.12 and later: an xsk attribute on a
// queue with a pool). A closed socket's pool is released by a kernel work
// item, after close(2) has returned; a driver that turns queues off when
// its XDP program goes (virtio-net's XDP_TX queues) must see the pools
// released first, or it keeps them ("Failed to disable zero-copy!") and a
// later run on that queue crashes the guest.

const (
	netdevCmdQueueGet   = 10
	netdevAttrQueueID   = 1
	netdevAttrQueueIfx  = 2
	netdevAttrQueueType = 3
	netdevAttrQueueXSK  = 7
	netdevQueueTypeRx   = 0
)

// PooledQueues returns the receive queues of the interface with index
// ifindex that hold a socket's buffer pool. A kernel that does not report
// pools gives none.
func PooledQueues(ifindex int) (map[int]bool, error) {
	// Every queue of the namespace, filtered here: as with dev-get, the
	// kernels at hand refuse a dump limited to one device.
	replies, err := netdevDump(netdevCmdQueueGet)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		return nil, nil // a kernel without queue-get
	}
	if err != nil {
		return nil, fmt.Errorf("netdev queue-get: %w", err)
	}
	pooled := map[int]bool{}
	for _, attrs := range replies {
		if q, ok := pooledRxQueue(attrs, ifindex); ok {
			pooled[q] = true
		}
	}
	return pooled, nil
}

// pooledRxQueue reads one queue's reply: its number, if it is a receive
// queue of ifindex with a pool.
func pooledRxQueue(attrs []syscall.NetlinkRouteAttr, ifindex int) (int, bool) {
	id, ifx, typ, xsk := -1, -1, -1, false
	for _, a := range attrs {
		switch {
		case a.Attr.Type == netdevAttrQueueID && len(a.Value) == 4:
			id = int(binary.NativeEndian.Uint32(a.Value))
		case a.Attr.Type == netdevAttrQueueIfx && len(a.Value) == 4:
			ifx = int(binary.NativeEndian.Uint32(a.Value))
		case a.Attr.Type == netdevAttrQueueType && len(a.Value) == 4:
			typ = int(binary.NativeEndian.Uint32(a.Value))
		case a.Attr.Type&^unix.NLA_F_NESTED == netdevAttrQueueXSK:
			xsk = true
		}
	}
	return id, xsk && ifx == ifindex && typ == netdevQueueTypeRx && id >= 0
}

// WaitPoolsReleased waits, up to limit, until none of queues of the
// interface with index ifindex holds a pool; it reports whether they were
// released (or cannot be told).
func WaitPoolsReleased(ifindex int, queues []int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		pooled, err := PooledQueues(ifindex)
		if err != nil {
			return true // nothing to wait by
		}
		held := false
		for _, q := range queues {
			held = held || pooled[q]
		}
		if !held {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}
