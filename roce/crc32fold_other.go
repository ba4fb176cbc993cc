//go:build !amd64

package roce

// haveFold256 is false: fold256 exists on amd64 only.
const haveFold256 = false

func fold256(reg uint32, p []byte, out *[16]byte) { panic("fold256: amd64 only") }
