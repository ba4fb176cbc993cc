// Package procmem reads and writes another process's memory for the daemon,
// which places RDMA data straight into its clients' registered buffers.
//
// It uses process_vm_readv and process_vm_writev: one copy between the
// daemon's frame and the client's pages, with many ranges in one system
// call. Measured here (bench/results/ANALYSIS.md): 0.6-0.7 µs a call for up
// to 4 KiB, 64 scattered 1 KiB pieces in 4.3 µs, 25 GB/s for 1 MiB. The
// alternative, pread and pwrite on /proc/PID/mem, stays bound to the process
// it was opened for, but copies twice in the kernel (a bounce page: 12 GB/s
// for 1 MiB) and makes a vectored call one walk of the other process's
// page tables per piece (26.5 µs for the 64 pieces).
//
// process_vm_* name the process by pid, and a pid is reused once its
// process is gone and reaped. A Process therefore holds a pidfd, which
// always means the process it was opened for, and consults it before an
// access, at most once in 50 µs (a poll costs as much as a small copy):
// once the process is known to have exited no access is made, and none
// reaches a later process with the same pid unless, within those 50 µs,
// the process exited, was reaped and the kernel handed its pid out again,
// which needs the pid allocator to go once around its whole space (it
// allocates cyclically).
//
//	p, err := procmem.Open(pid)
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//	if err := p.WriteAt(frame, addr); err != nil {
//		return err // ErrGone, ErrFault
//	}
package procmem
