package daemon

import "github.com/softnic/softnic/hostif"

// Another process may hold a session's socket: a forked child, or one the
// socket was passed to. Through the kernel's uverbs such a process uses
// the context as its owner does (the ioctl path asks nothing of the
// caller), and rdma-core's programs rely on it (a forked child allocates
// device memory on its parent's context). The daemon lets it run the
// commands of sharedOps, under the session's own uid and gid only: they
// make, change and destroy the session's objects, whose memory is the
// daemon's (rings, device memory), and name no memory of a process.
// Every command that names a process's memory (registering, re-registering
// or prefetching a region, sharing a mapping) or speaks for the process
// (hello, the connection manager, whose IDs and ports are the session's
// process's) stays the session's process's: through the kernel a child
// would register its own address space, which the daemon cannot reach
// (the session's memory descriptors are its parent's), and so it gets
// EACCES. A command not listed is refused, so a new one is refused until
// it is judged. The session is still its process's: it ends when that
// process exits, execs or changes credentials, whoever else holds it.
var sharedOps = map[hostif.Op]bool{
	hostif.OpAllocPD: true, hostif.OpDeallocPD: true, hostif.OpDeregMR: true,
	hostif.OpCreateCompChannel: true, hostif.OpDestroyCompChannel: true,
	hostif.OpCreateCQ: true, hostif.OpDestroyCQ: true, hostif.OpResizeCQ: true,
	hostif.OpCreateQP: true, hostif.OpModifyQP: true, hostif.OpDestroyQP: true,
	hostif.OpCreateAH: true, hostif.OpDestroyAH: true,
	hostif.OpCreateSRQ: true, hostif.OpModifySRQ: true, hostif.OpDestroySRQ: true,
	hostif.OpQueryPort: true, hostif.OpQueryGID: true, hostif.OpQueryResources: true, hostif.OpQueryCounters: true,
	hostif.OpAllocDM: true, hostif.OpFreeDM: true, hostif.OpRegDMMR: true,
	hostif.OpAllocMW: true, hostif.OpDeallocMW: true,
	hostif.OpAttachMcast: true, hostif.OpDetachMcast: true,
}
