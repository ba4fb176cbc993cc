package roce

// foldConsts are fold256's multipliers (crc32fold_amd64.s), four lanes of
// 128 bits each for a fold over 2048 bits, four for 512 bits, then one
// lane each for 384, 256 and 128 bits and a lane of zeros. A fold
// over D bits multiplies a lane's first 8 bytes by x^(D+32) mod P and its
// last 8 by x^(D-32) mod P, P being CRC-32's (IEEE) polynomial, both
// bit-reflected as the CRC keeps its register and shifted left by one
// (foldConst; TestFoldConsts derives them). The instructions multiply
// lane by lane.
var foldConsts = [24]uint64{
	0x11542778a, 0x1322d1430, 0x11542778a, 0x1322d1430,
	0x11542778a, 0x1322d1430, 0x11542778a, 0x1322d1430,
	0x154442bd4, 0x1c6e41596, 0x154442bd4, 0x1c6e41596,
	0x154442bd4, 0x1c6e41596, 0x154442bd4, 0x1c6e41596,
	0x03db1ecdc, 0x174359406, 0x0f1da05aa, 0x15a546366,
	0x1751997d0, 0x0ccaa009e, 0, 0,
}
