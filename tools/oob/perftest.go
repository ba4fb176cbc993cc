package oob

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"
)

// Perftest protocol constants (perftest 4.5-0.17).
const (
	// PerftestVersion is the version string perftest 4.5-0.17 sends:
	// AC_INIT([perftest],[6.06]) in configure.ac, copied into a 16-byte
	// field (MAX_VERSION) with strncpy, so NUL-padded.
	PerftestVersion = "6.06"
	// VersionMsgLen is sizeof(user_param->rem_version) (perftest_parameters.h).
	VersionMsgLen = 16
	// MinPeerVersion is what check_version_compatibility demands.
	MinPeerVersion = 5.70
	// KeysMsgLen is KEY_MSG_SIZE_GID (perftest_communication.h): the keys
	// message with a GID, 107 characters and the NUL.
	KeysMsgLen = 108
	// MTUMsgLen is the MTU message once both sides are 5.31 or later
	// (check_mtu: size_of_cur = sizeof(char[2])): one digit and the NUL.
	MTUMsgLen = 2
	// DoneMsg is what ctx_close_connection writes last ("done" with NUL).
	DoneMsg = "done\x00"
)

// PerftestDest is one QP's keys as perftest exchanges them (struct
// pingpong_dest, the fields ethernet_write_keys prints).
type PerftestDest struct {
	LID      uint16
	OutReads uint16
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// Field offsets of the keys message, following KEY_PRINT_FMT_GID
// "%04x:%04x:%06x:%06x:%08x:%016llx:" then 16 x "%02x:" then "%08x:".
const (
	keyLID      = 0  // 4 digits
	keyOutReads = 5  // 4
	keyQPN      = 10 // 6
	keyPSN      = 17 // 6
	keyRKey     = 24 // 8
	keyVAddr    = 33 // 16
	keyGID      = 50 // 16 x 3
	keySRQN     = 98 // 8, then ':' at 106 and NUL at 107
)

// Format returns the 108-byte keys message ethernet_write_keys sends when
// a GID index is in use, which is always the case on RoCE (check_link sets
// gid_index 0 on Ethernet links).
func (d PerftestDest) Format() ([]byte, error) {
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return nil, fmt.Errorf("%w: QPN %#x or PSN %#x above 24 bits", ErrFieldRange, d.QPN, d.PSN)
	}
	b := make([]byte, KeysMsgLen)
	put := func(off, n int, v uint64) {
		putHex(b[off:off+n], v)
		b[off+n] = ':'
	}
	put(keyLID, 4, uint64(d.LID))
	put(keyOutReads, 4, uint64(d.OutReads))
	put(keyQPN, 6, uint64(d.QPN))
	put(keyPSN, 6, uint64(d.PSN))
	put(keyRKey, 8, uint64(d.RKey))
	put(keyVAddr, 16, d.VAddr)
	for i, g := range d.GID {
		put(keyGID+3*i, 2, uint64(g))
	}
	put(keySRQN, 8, uint64(d.SRQN))
	b[KeysMsgLen-1] = 0
	return b, nil
}

// ParsePerftestDest parses a keys message. ethernet_read_keys splits on ':'
// with strtol; this parser insists on the exact widths perftest prints.
func ParsePerftestDest(b []byte) (PerftestDest, error) {
	var d PerftestDest
	if len(b) != KeysMsgLen {
		return d, fmt.Errorf("%w: keys message is %d bytes, want %d", ErrMessageLength, len(b), KeysMsgLen)
	}
	if b[KeysMsgLen-1] != 0 {
		return d, fmt.Errorf("%w: keys message not NUL-terminated", ErrMessageFormat)
	}
	field := func(off, n int, name string) (uint64, error) {
		if b[off+n] != ':' {
			return 0, fmt.Errorf("%w: keys message lacks ':' after %s", ErrMessageFormat, name)
		}
		return hexField(b[off:off+n], name)
	}
	var v [7]uint64
	var err error
	for i, f := range []struct {
		off, n int
		name   string
	}{
		{keyLID, 4, "LID"}, {keyOutReads, 4, "out_reads"}, {keyQPN, 6, "QPN"}, {keyPSN, 6, "PSN"},
		{keyRKey, 8, "rkey"}, {keyVAddr, 16, "vaddr"}, {keySRQN, 8, "SRQN"},
	} {
		if v[i], err = field(f.off, f.n, f.name); err != nil {
			return PerftestDest{}, err
		}
	}
	for i := range d.GID {
		g, err := field(keyGID+3*i, 2, "GID")
		if err != nil {
			return PerftestDest{}, err
		}
		d.GID[i] = byte(g)
	}
	d.LID, d.OutReads, d.QPN, d.PSN = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3])
	d.RKey, d.VAddr, d.SRQN = uint32(v[4]), v[5], uint32(v[6])
	return d, nil
}

// FormatVersion returns the 16-byte versions message.
func FormatVersion(v string) ([]byte, error) {
	if len(v) >= VersionMsgLen {
		return nil, fmt.Errorf("%w: version %q longer than %d bytes", ErrFieldRange, v, VersionMsgLen-1)
	}
	b := make([]byte, VersionMsgLen)
	copy(b, v)
	return b, nil
}

// ParseVersion returns the version string of a versions message and its
// number. perftest compares atof() of it with 5.70.
func ParseVersion(b []byte) (string, float64, error) {
	if len(b) != VersionMsgLen {
		return "", 0, fmt.Errorf("%w: versions message is %d bytes, want %d", ErrMessageLength, len(b), VersionMsgLen)
	}
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return "", 0, fmt.Errorf("%w: version not NUL-terminated", ErrMessageFormat)
	}
	s := string(b[:n])
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return s, 0, fmt.Errorf("%w: version %q is not a number", ErrMessageFormat, s)
	}
	return s, f, nil
}

// FormatMTU returns the MTU message: sprintf("%d") of the ibv_mtu enum
// (1 = 256 ... 5 = 4096) in two bytes.
func FormatMTU(mtu int) ([]byte, error) {
	if mtu < 1 || mtu > 5 {
		return nil, fmt.Errorf("%w: MTU enum %d", ErrFieldRange, mtu)
	}
	return []byte{byte('0' + mtu), 0}, nil
}

// ParseMTU parses the MTU message into the ibv_mtu enum value.
func ParseMTU(b []byte) (int, error) {
	if len(b) != MTUMsgLen {
		return 0, fmt.Errorf("%w: MTU message is %d bytes, want %d", ErrMessageLength, len(b), MTUMsgLen)
	}
	if b[0] < '1' || b[0] > '5' || b[1] != 0 {
		return 0, fmt.Errorf("%w: MTU message %q", ErrFieldRange, b)
	}
	return int(b[0] - '0'), nil
}

// MTUBytes converts the ibv_mtu enum to bytes (MTU_SIZE: 128 << mtu).
func MTUBytes(mtu int) int { return 128 << mtu }

// MTUEnum converts 256..4096 to the ibv_mtu enum, 0 if not a valid IB MTU.
func MTUEnum(bytes int) int {
	for e := 1; e <= 5; e++ {
		if MTUBytes(e) == bytes {
			return e
		}
	}
	return 0
}

// BWReport is the bandwidth report (struct bw_report_data) as
// xchg_bw_reports sends it: five 8-byte big-endian values, each exchanged
// on its own, when report_per_port is off and the peer is 5.33 or later.
type BWReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// Bounds on the system data a peer may send: far above real page and
// cache line sizes (4 KiB or 64 KiB, 64 or 128 bytes).
const (
	MaxCycleBuffer = 16 << 20
	MaxCacheLine   = 4096
)

// SysData is what check_sys_data exchanges: both sides keep the maximum.
type SysData struct {
	CycleBuffer   uint32 // page size (sysconf(_SC_PAGESIZE))
	CacheLineSize uint32
}

// Negotiated is what Setup agreed with the peer.
type Negotiated struct {
	RemoteVersion string
	SysData       SysData // the maxima of both sides
	MTU           int     // ibv_mtu enum, the minimum of both sides
}

// Session is one perftest out-of-band connection.
type Session struct {
	s *stream
	// WaitTimeout bounds handshakes that wait for the peer's test run
	// (the server of a bandwidth test waits out the client's whole run).
	WaitTimeout time.Duration
	// binaryKeys is perftest's -R exchange (NewRDMACMSession): keys as
	// the binary struct, no "done" at the close.
	binaryKeys bool
	gidIndex   int // the last field of a binary keys message
}

// NewSession wraps an established connection. timeout bounds each
// message outside a test run (DefaultTimeout if zero).
func NewSession(conn net.Conn, role Role, timeout time.Duration) *Session {
	return &Session{s: newStream(conn, role, timeout), WaitTimeout: 30 * time.Minute}
}

// Setup runs exchange_versions, check_version_compatibility,
// check_sys_data and check_mtu, in that order (write_bw.c main and the
// other tests alike). mtu is this side's ibv_mtu enum.
func (p *Session) Setup(version string, sys SysData, mtu int) (Negotiated, error) {
	var n Negotiated
	var err error
	if n.RemoteVersion, err = p.exchangeVersions(version); err != nil {
		return n, err
	}
	if n.SysData, err = p.exchangeSysData(sys); err != nil {
		return n, err
	}
	n.MTU, err = p.exchangeMTU(mtu)
	return n, err
}

// exchangeVersions is exchange_versions and check_version_compatibility:
// it returns the peer's version string.
func (p *Session) exchangeVersions(version string) (string, error) {
	mine, err := FormatVersion(version)
	theirs, err := p.s.swap("versions", VersionMsgLen, mine, err)
	if err != nil {
		return "", err
	}
	rv, f, err := ParseVersion(theirs)
	if err != nil {
		return "", err
	}
	if f < MinPeerVersion {
		return "", fmt.Errorf("%w: peer speaks %q, need %.2f or later", ErrVersion, rv, MinPeerVersion)
	}
	return rv, nil
}

// exchangeSysData is check_sys_data: both sides keep the maxima.
func (p *Session) exchangeSysData(sys SysData) (SysData, error) {
	var n SysData
	var err error
	if n.CycleBuffer, err = p.exchangeMax("cycle buffer size", sys.CycleBuffer); err != nil {
		return n, err
	}
	if n.CacheLineSize, err = p.exchangeMax("cache line size", sys.CacheLineSize); err != nil {
		return n, err
	}
	// Both sides size their buffers from these: a peer's absurd values
	// (perftest sends its page size and cache line size) must not make
	// this side allocate gigabytes.
	if n.CycleBuffer > MaxCycleBuffer || n.CacheLineSize > MaxCacheLine {
		return n, fmt.Errorf("%w: system data %+v (at most %d and %d)", ErrFieldRange, n, MaxCycleBuffer, MaxCacheLine)
	}
	return n, nil
}

// exchangeMax exchanges one 4-byte big-endian value and returns the larger.
func (p *Session) exchangeMax(what string, v uint32) (uint32, error) {
	var m, r [4]byte
	binary.BigEndian.PutUint32(m[:], v)
	if err := p.s.exchange(what, m[:], r[:]); err != nil {
		return 0, err
	}
	return max(v, binary.BigEndian.Uint32(r[:])), nil
}

// exchangeMTU is check_mtu: the smaller of both sides' ibv_mtu enums.
func (p *Session) exchangeMTU(mtu int) (int, error) {
	mine, err := FormatMTU(mtu)
	theirs, err := p.s.swap("MTU", MTUMsgLen, mine, err)
	if err != nil {
		return 0, err
	}
	remote, err := ParseMTU(theirs)
	if err != nil {
		return 0, err
	}
	return min(mtu, remote), nil
}

// Keys is one ctx_hand_shake: the client writes its keys first.
func (p *Session) Keys(local PerftestDest) (PerftestDest, error) {
	if p.binaryKeys {
		theirs, err := p.s.swap("keys", KeysBinLen, local.FormatBinary(p.gidIndex), nil)
		if err != nil {
			return PerftestDest{}, err
		}
		return ParseBinaryDest(theirs)
	}
	mine, err := local.Format()
	theirs, err := p.s.swap("keys", KeysMsgLen, mine, err)
	if err != nil {
		return PerftestDest{}, err
	}
	return ParsePerftestDest(theirs)
}

// Report is xchg_bw_reports: size, iterations, peak, average and message
// rate, each exchanged on its own as 8 big-endian bytes (hton_long and
// hton_double in perftest_communication.h; iterations is 64 bits for peers
// of version 5.33 and later, which Setup guarantees).
func (p *Session) Report(local BWReport) (BWReport, error) {
	var r BWReport
	vals := []uint64{local.Size, local.Iters, math.Float64bits(local.BWPeak), math.Float64bits(local.BWAvg), math.Float64bits(local.MsgRate)}
	var got [5]uint64
	var m, t [8]byte
	for i, v := range vals {
		binary.BigEndian.PutUint64(m[:], v)
		if err := p.s.exchange("bandwidth report", m[:], t[:]); err != nil {
			return r, err
		}
		got[i] = binary.BigEndian.Uint64(t[:])
	}
	r = BWReport{Size: got[0], Iters: got[1], BWPeak: math.Float64frombits(got[2]),
		BWAvg: math.Float64frombits(got[3]), MsgRate: math.Float64frombits(got[4])}
	return r, nil
}

// Close is ctx_close_connection: one more keys exchange, then "done"
// (not in the -R mode). Neither side reads the peer's "done"; the caller
// closes the connection.
func (p *Session) Close(local PerftestDest) error {
	if _, err := p.Keys(local); err != nil {
		return fmt.Errorf("oob: closing handshake: %w", err)
	}
	if p.binaryKeys {
		return nil
	}
	return p.s.write("done", []byte(DoneMsg))
}
