package main

import (
	"flag"
	"strconv"

	"github.com/softnic/softnic/daemon"
)

// defineLimits adds softnic daemon's per-user bounds to fs, into l
// (daemon.Limits; -1 lifts a bound).
func defineLimits(fs *flag.FlagSet, l *daemon.Limits) {
	d := daemon.DefaultLimits
	*l = d
	for _, c := range []struct {
		v    *int
		name string
		what string
	}{
		{&l.Sessions, "max-sessions", "control connections open at once (one more: EAGAIN)"},
		{&l.PDs, "max-pds", "protection domains"},
		{&l.MRs, "max-mrs", "memory regions"},
		{&l.CQs, "max-cqs", "completion queues"},
		{&l.QPs, "max-qps", "queue pairs"},
		{&l.SRQs, "max-srqs", "shared receive queues"},
		{&l.AHs, "max-ahs", "address handles"},
		{&l.CMIDs, "max-cm-ids", "rdma_cm IDs"},
		{&l.DMs, "max-dms", "device memory allocations (ibv_alloc_dm)"},
		{&l.MWs, "max-mws", "memory windows"},
		{&l.McastAttachments, "max-mcast-attachments", "multicast attachments (a UD QP's group, an rdma_cm ID's join)"},
		{&l.TMTags, "max-tm-tags", "tagged buffers of tag matching SRQs (each SRQ counts its max_num_tags)"},
		{&l.RawQPs, "max-raw-qps", "raw packet QPs (they count as QPs too)"},
		{&l.Flows, "max-flows", "flows steering frames to raw packet QPs"},
	} {
		fs.IntVar(c.v, c.name, *c.v, "per user: at most this many "+c.what+"; -1: no bound")
	}
	// 0: daemon.DescriptorShare of the limit the daemon runs with.
	l.Descriptors = 0
	fs.IntVar(&l.Descriptors, "max-descriptors", 0, "per user: at most this many of the daemon's file descriptors "+
		"(sessions, channels; one more: EMFILE); 0: "+strconv.Itoa(d.Descriptors)+
		", or less where the daemon's descriptor limit is low (half of it, less a reserve, over the devices served); -1: no bound")
	fs.Var((*limitSize)(&l.RingBytes), "max-ring-bytes", "per user: at most this much of the daemon's memory in rings (K, M, G suffixes; -1: no bound)")
	fs.Var((*limitSize)(&l.SharedBytes), "max-shared-bytes", "per user: at most this much memory shared with the daemon by descriptor (K, M, G; -1: no bound)")
	fs.Var((*limitSize)(&l.DMBytes), "max-dm-bytes", "per user: at most this much of the device's memory (ibv_alloc_dm; K, M; -1: the whole device)")
}

// limitSize is a byte bound: a size (byteSize) or -1 for none.
type limitSize int64

func (l *limitSize) String() string { return strconv.FormatInt(int64(*l), 10) }

func (l *limitSize) Set(v string) error {
	if v == "-1" {
		*l = -1
		return nil
	}
	return (*byteSize)(l).Set(v)
}
