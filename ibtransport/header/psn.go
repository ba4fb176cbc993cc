package header

// PSN is a 24-bit packet sequence number. PSNs wrap at 2^24; comparisons
// treat the space as a circle, so a PSN is "after" another when it lies in
// the half circle ahead of it.
type PSN uint32

// PSNMask keeps the 24 bits of a PSN.
const PSNMask = 0xffffff

// Add returns p advanced by n, wrapped to 24 bits.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Diff returns the signed distance a - b on the PSN circle, in
// [-2^23, 2^23). Shifting the 24-bit difference into the top of an int32
// makes the sign bit carry the wrap-around.
func (a PSN) Diff(b PSN) int32 { return int32((uint32(a)-uint32(b))<<8) >> 8 }

// Before reports whether a comes before b.
func (a PSN) Before(b PSN) bool { return a.Diff(b) < 0 }

// After reports whether a comes after b.
func (a PSN) After(b PSN) bool { return a.Diff(b) > 0 }

// InWindow reports whether p is one of the n PSNs starting at start.
func (p PSN) InWindow(start PSN, n uint32) bool {
	return (uint32(p)-uint32(start))&PSNMask < n
}
