// Package procmem reads and writes a client process's memory for the
// daemon, which places RDMA data straight into its clients' registered
// buffers.
//
// It does so through descriptors the client opened itself and passed over
// its control socket: its /proc/self/mem and /proc/self/maps. The kernel
// binds such a descriptor, at open, to the address space the process had
// then, and checked then that the opener may reach it. So the daemon
// reaches exactly what the client could reach itself, with no right of its
// own to trace or read other processes; and once that address space is
// gone (the process exited, or exec'd any program, setuid ones included)
// every read and write through the descriptors moves nothing, at once,
// whatever the pid runs by then. A registration is thereby bound to the
// caller's address space at the time of the call, as the kernel's
// ib_umem_get is bound to current->mm. Why this and not process_vm_readv
// (which names a pid, follows whatever it runs, and needs ptrace rights)
// or re-backing memory with memfds: docs/DESIGN.md.
//
// A read or write of /proc/PID/mem copies through a kernel page and walks
// the target's page tables once per page; one call moves one contiguous
// range of the target, from or to many local buffers, so a batch of
// packets for adjacent addresses is one system call.
//
//	p, err := procmem.FromDescriptors(memFD, mapsFD)
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//	if err := p.WriteAt(frame, addr); err != nil {
//		return err // ErrGone, ErrFault
//	}
package procmem
