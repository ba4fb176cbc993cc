package interop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// readPcap returns the frames of a classic little-endian pcap file with
// Ethernet link type, the format tcpdump -w and text2pcap -F pcap write.
func readPcap(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < 24 {
		return nil, errors.New("short pcap header")
	}
	switch binary.LittleEndian.Uint32(data) {
	case 0xa1b2c3d4, 0xa1b23c4d: // microsecond, nanosecond timestamps
	default:
		return nil, fmt.Errorf("not a little-endian classic pcap (magic %#x)", binary.LittleEndian.Uint32(data))
	}
	if lt := binary.LittleEndian.Uint32(data[20:]); lt != 1 {
		return nil, fmt.Errorf("link type %d, want 1 (Ethernet)", lt)
	}
	var frames [][]byte
	for off := 24; off < len(data); {
		if off+16 > len(data) {
			return nil, fmt.Errorf("truncated record header at %d", off)
		}
		incl := int(binary.LittleEndian.Uint32(data[off+8:]))
		orig := int(binary.LittleEndian.Uint32(data[off+12:]))
		off += 16
		if off+incl > len(data) {
			return nil, fmt.Errorf("truncated record at %d", off)
		}
		if incl != orig {
			return nil, fmt.Errorf("frame at %d cut to %d of %d bytes", off, incl, orig)
		}
		frames = append(frames, data[off:off+incl])
		off += incl
	}
	return frames, nil
}

// roceV2ICRC checks one Ethernet/IPv4/UDP:4791 frame's ICRC the way
// IBA Annex 17 defines it, independently of the roce package.
func roceV2ICRC(frame []byte) (want, got uint32, err error) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return 0, 0, errors.New("not IPv4 over Ethernet")
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ip[9] != 17 || total > len(ip) || total < ihl+8+12+4 {
		return 0, 0, errors.New("not a UDP datagram long enough for BTH and ICRC")
	}
	ip = ip[:total] // drop Ethernet padding
	if binary.BigEndian.Uint16(ip[ihl+2:]) != 4791 {
		return 0, 0, errors.New("UDP destination port is not 4791")
	}
	masked := append(make([]byte, 0, 8+total), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	masked = append(masked, ip[:total-4]...)
	m := masked[8:]
	m[1] = 0xff                     // TOS
	m[8] = 0xff                     // TTL
	m[10], m[11] = 0xff, 0xff       // header checksum
	m[ihl+6], m[ihl+7] = 0xff, 0xff // UDP checksum
	m[ihl+8+4] = 0xff               // BTH FECN, BECN, reserved
	return crc32.ChecksumIEEE(masked), binary.LittleEndian.Uint32(ip[total-4:]), nil
}

// TestGoldenPcapsHaveValidICRC checks that every frame of every committed
// capture is RoCEv2 and carries a correct ICRC, so the captures can serve as
// golden vectors.
func TestGoldenPcapsHaveValidICRC(t *testing.T) {
	files, err := filepath.Glob("../../roce/testdata/*.pcap")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no captures under roce/testdata")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			frames, err := readPcap(file)
			require.NoError(t, err)
			require.NotEmpty(t, frames)
			for i, f := range frames {
				want, got, err := roceV2ICRC(f)
				require.NoError(t, err, "frame %d", i+1)
				require.Equal(t, want, got, "frame %d ICRC", i+1)
			}
		})
	}
}

func TestICRCCheckDetectsCorruption(t *testing.T) {
	frames, err := readPcap("../../roce/testdata/rxe-rc-pingpong.pcap")
	require.NoError(t, err)
	f := append([]byte(nil), frames[0]...)
	want, got, err := roceV2ICRC(f)
	require.NoError(t, err)
	require.Equal(t, want, got)
	f[len(f)-10] ^= 1 // a payload bit
	want, got, err = roceV2ICRC(f)
	require.NoError(t, err)
	require.NotEqual(t, want, got)
}
