package main

import (
	"fmt"
	"hash/crc32"
	"testing"
)

// BenchmarkDataFootprint models the data work softnic does for one 64 KiB
// WRITE at IB MTU 4096 — on each of 16 frames: copy 4 KiB from the sender's
// buffer into the frame, compute a CRC over the frame, copy the payload
// into the receiver's buffer — with the buffers of 1, 16 and 1024 QPs, laid
// out as perftest lays them out (one 64 KiB area per QP and side). It shows
// what the aggregate write_bw over many QPs pays for touching 128 MiB of
// buffers instead of 128 KiB, whatever the transport's per-QP state costs:
//
//	go test ./bench/suite -run '^$' -bench DataFootprint
func BenchmarkDataFootprint(b *testing.B) {
	for _, qps := range []int{1, 16, 1024} {
		b.Run(fmt.Sprintf("qps=%d", qps), func(b *testing.B) {
			const msg, mtu, headers = 64 << 10, 4096, 58
			src := make([]byte, qps*msg)
			dst := make([]byte, qps*msg)
			// Written first, as perftest fills its buffers: memory never
			// written reads as the kernel's one zero page, and the first
			// write to each page faults, which would be priced instead.
			for i := range src {
				src[i] = byte(i * 7)
			}
			for i := range dst {
				dst[i] = 1
			}
			frame := make([]byte, headers+mtu+4)
			b.SetBytes(msg)
			var sum uint32
			for i := 0; b.Loop(); i++ {
				area := (i % qps) * msg
				for off := 0; off < msg; off += mtu {
					copy(frame[headers:], src[area+off:area+off+mtu])
					sum += crc32.ChecksumIEEE(frame)
					copy(dst[area+off:area+off+mtu], frame[headers:headers+mtu])
				}
			}
			_ = sum
		})
	}
}
