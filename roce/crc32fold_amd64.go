package roce

import "golang.org/x/sys/cpu"

// fold256 is in crc32fold_amd64.s.
//
//go:noescape
func fold256(reg uint32, p []byte, out *[16]byte)

// haveFold256 reports whether the CPU and the OS run fold256's AVX-512
// carry-less multiplies.
var haveFold256 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ
