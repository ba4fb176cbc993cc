package procmem

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// Mapping is one line of /proc/PID/maps: the addresses [Start, End),
// whether they may be read and written, and what backs them: the
// device (major, minor) and inode of a file, 0 and 0 for anonymous
// memory.
type Mapping struct {
	Start, End      uint64
	Readable, Write bool
	Major, Minor    uint32
	Inode           uint64
}

// Anonymous reports whether no file backs the mapping (heap, stack,
// anonymous mmap).
func (m Mapping) Anonymous() bool { return m.Inode == 0 && m.Major == 0 && m.Minor == 0 }

// CheckMapped reports ErrFault unless every byte of [addr, addr+n) is mapped
// readable in the process, and writable too if write is set: registering
// memory checks this, as the kernel's ibv_reg_mr fails with EFAULT on memory
// it cannot pin. It reads the maps descriptor the process gave, so it
// tells about no address space but that one.
func (p *Process) CheckMapped(addr, n uint64, write bool) error {
	return p.CheckMappedBy(addr, n, write, nil)
}

// CheckMappedBy is CheckMapped, and also reports ErrFault unless backed
// accepts every mapping of the range (nil accepts all).
func (p *Process) CheckMappedBy(addr, n uint64, write bool, backed func(Mapping) bool) error {
	data, err := p.readMaps()
	if err != nil {
		return err
	}
	maps, err := ParseMaps(data)
	if err != nil {
		return err
	}
	if !CoveredBy(maps, addr, n, write, backed) {
		return ErrFault
	}
	return nil
}

// readMaps reads the whole maps file; nothing in it means the address
// space is gone (a live one has at least one mapping).
func (p *Process) readMaps() ([]byte, error) {
	if p.gone.Load() {
		return nil, ErrGone
	}
	data := make([]byte, 0, 16<<10)
	for {
		if len(data) == cap(data) {
			if len(data) >= maxMaps {
				return nil, fmt.Errorf("procmem: maps longer than %d bytes", maxMaps)
			}
			data = append(data, 0)[:len(data)]
		}
		n, err := unix.Pread(p.maps, data[len(data):cap(data)], int64(len(data)))
		if err == unix.EINTR {
			continue
		}
		if err == unix.ESRCH {
			break // the process has gone: no mappings
		}
		if err != nil {
			return nil, fmt.Errorf("procmem: read maps: %w", err)
		}
		if n == 0 {
			break
		}
		data = data[:len(data)+n]
	}
	if len(data) == 0 {
		p.gone.Store(true)
		return nil, ErrGone
	}
	return data, nil
}

// maxMaps bounds the maps text read (a process may have 65530 mappings,
// vm.max_map_count, of at most about 150 bytes each).
const maxMaps = 64 << 20

// Covered reports whether maps, sorted by address as the kernel lists them,
// cover [addr, addr+n) without a gap with the rights asked for.
func Covered(maps []Mapping, addr, n uint64, write bool) bool {
	return CoveredBy(maps, addr, n, write, nil)
}

// CoveredBy is Covered, every mapping of the range also accepted by
// backed (nil accepts all).
func CoveredBy(maps []Mapping, addr, n uint64, write bool, backed func(Mapping) bool) bool {
	end := addr + n
	if end < addr {
		return false
	}
	for _, m := range maps {
		if addr >= end {
			break
		}
		if m.End <= addr {
			continue
		}
		if m.Start > addr || !m.Readable || (write && !m.Write) || (backed != nil && !backed(m)) {
			return false
		}
		addr = m.End
	}
	return addr >= end
}

// ParseMaps parses the text of /proc/PID/maps.
func ParseMaps(data []byte) ([]Mapping, error) {
	var maps []Mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m, err := parseMapsLine(sc.Bytes())
		if err != nil {
			return nil, err
		}
		maps = append(maps, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("procmem: maps: %w", err)
	}
	return maps, nil
}

// parseMapsLine parses "start-end perms offset dev inode path".
func parseMapsLine(line []byte) (Mapping, error) {
	bad := func() (Mapping, error) { return Mapping{}, fmt.Errorf("procmem: maps line %q", line) }
	f := bytes.Fields(line)
	if len(f) < 5 || len(f[1]) < 4 {
		return bad()
	}
	lo, hi, ok := bytes.Cut(f[0], []byte("-"))
	maj, min, ok2 := bytes.Cut(f[3], []byte(":"))
	if !ok || !ok2 {
		return bad()
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	major, err3 := strconv.ParseUint(string(maj), 16, 32)
	minor, err4 := strconv.ParseUint(string(min), 16, 32)
	inode, err5 := strconv.ParseUint(string(f[4]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil || end < start {
		return bad()
	}
	return Mapping{Start: start, End: end, Readable: f[1][0] == 'r', Write: f[1][1] == 'w',
		Major: uint32(major), Minor: uint32(minor), Inode: inode}, nil
}
