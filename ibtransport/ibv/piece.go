package ibv

// Piece is one copy of a vectored memory access (as process_vm_readv's
// pair of iovecs): between Buf and len(Buf) bytes at Addr of a memory
// that is not this process's.
type Piece struct {
	Buf  []byte
	Addr uint64
}
