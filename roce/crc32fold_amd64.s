#include "textflag.h"

// The folding constants are foldConsts (crc32fold.go): bytes 0-63 fold
// 2048 bits (a 256-byte block onto the next), bytes 64-127 512 bits (a
// register onto the next), each 128-bit pair repeated in all four lanes;
// bytes 128-191 fold a register's lanes 0, 1 and 2 onto its lane 3 (384,
// 256 and 128 bits), lane 3's multipliers 0.

// func fold256(reg uint32, p []byte, out *[16]byte)
//
// fold256 folds p (len a multiple of 256, at least 256) into 16 bytes
// congruent to it modulo the polynomial, reg XORed into its first four
// bytes, and stores them in out. Four 512-bit accumulators, one per 64
// bytes of a block, fold independently, so that the multiplies' latency
// overlaps (hash/crc32 folds one accumulator, latency-bound); at the end
// they fold onto the last.
TEXT ·fold256(SB), NOSPLIT, $0-40
	MOVL reg+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ out+32(FP), DI

	VMOVDQU64 0(SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VMOVD     AX, X10 // zeroes the rest of Z10
	VPXORQ    Z10, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX
	JZ        reduce

	VMOVDQU64 ·foldConsts+0(SB), Z0

loop:
	VMOVDQU64  0(SI), Z11
	VMOVDQU64  64(SI), Z12
	VMOVDQU64  128(SI), Z13
	VMOVDQU64  192(SI), Z14
	VPCLMULQDQ $0x11, Z0, Z1, Z5
	VPCLMULQDQ $0x00, Z0, Z1, Z1
	VPCLMULQDQ $0x11, Z0, Z2, Z6
	VPCLMULQDQ $0x00, Z0, Z2, Z2
	VPCLMULQDQ $0x11, Z0, Z3, Z7
	VPCLMULQDQ $0x00, Z0, Z3, Z3
	VPCLMULQDQ $0x11, Z0, Z4, Z8
	VPCLMULQDQ $0x00, Z0, Z4, Z4
	VPTERNLOGD $0x96, Z11, Z5, Z1 // Z1 ^= Z5 ^ Z11
	VPTERNLOGD $0x96, Z12, Z6, Z2
	VPTERNLOGD $0x96, Z13, Z7, Z3
	VPTERNLOGD $0x96, Z14, Z8, Z4
	ADDQ       $256, SI
	SUBQ       $256, CX
	JNZ        loop

reduce:
	VMOVDQU64  ·foldConsts+64(SB), Z9
	VPCLMULQDQ $0x11, Z9, Z1, Z5
	VPCLMULQDQ $0x00, Z9, Z1, Z1
	VPTERNLOGD $0x96, Z1, Z5, Z2
	VPCLMULQDQ $0x11, Z9, Z2, Z6
	VPCLMULQDQ $0x00, Z9, Z2, Z2
	VPTERNLOGD $0x96, Z2, Z6, Z3
	VPCLMULQDQ $0x11, Z9, Z3, Z7
	VPCLMULQDQ $0x00, Z9, Z3, Z3
	VPTERNLOGD $0x96, Z3, Z7, Z4

	// The four lanes of Z4 onto its last.
	VMOVDQU64     ·foldConsts+128(SB), Z9
	VPCLMULQDQ    $0x11, Z9, Z4, Z5
	VPCLMULQDQ    $0x00, Z9, Z4, Z6
	VPXORQ        Z5, Z6, Z5       // lanes 0-2 folded, lane 3 zero
	VEXTRACTF32X4 $3, Z4, X7
	VEXTRACTF32X4 $1, Z5, X8
	VEXTRACTF32X4 $2, Z5, X11
	VPTERNLOGD    $0x96, X8, X5, X7 // X7 ^= X5 ^ X8
	VPXORQ        X11, X7, X7
	VMOVDQU       X7, (DI)
	VZEROUPPER
	RET
