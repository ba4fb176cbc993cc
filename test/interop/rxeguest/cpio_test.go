package rxeguest

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

type cpioEntry struct {
	name        string
	mode        uint32
	data        []byte
	rdevMajor   uint32
	rdevMinor   uint32
	headerAlign int64
}

// readNewc parses a newc archive, checking the alignment rules the kernel
// relies on.
func readNewc(t *testing.T, archive []byte) []cpioEntry {
	t.Helper()
	var entries []cpioEntry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(archive[off+6+8*i:off+14+8*i]), 16, 32)
		require.NoError(t, err)
		return uint32(v)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		require.Zero(t, off%4, "header at %d not 4-byte aligned", off)
		require.Equal(t, "070701", string(archive[off:off+6]))
		mode, size, major, minor, nameSize := field(1), field(6), field(9), field(10), field(11)
		nameStart := off + 110
		name := string(archive[nameStart : nameStart+int(nameSize)-1])
		require.Zero(t, archive[nameStart+int(nameSize)-1], "name not NUL-terminated")
		dataStart := align(nameStart + int(nameSize))
		data := archive[dataStart : dataStart+int(size)]
		off = align(dataStart + int(size))
		if name == "TRAILER!!!" {
			require.Equal(t, len(archive), off, "bytes after the trailer")
			return entries
		}
		entries = append(entries, cpioEntry{name: name, mode: mode, data: data, rdevMajor: major, rdevMinor: minor})
	}
}

func TestTreeWritesNewcArchive(t *testing.T) {
	tr := newTree()
	tr.File("/usr/bin/tool", 0o755, []byte("abcde"))
	tr.File("init", 0o755, []byte("#!/bin/sh\n"))
	tr.Symlink("bin/sh", "busybox")
	tr.CharDev("dev/console", 0o600, 5, 1)
	tr.Dir("proc")
	var buf bytes.Buffer
	require.NoError(t, tr.Write(&buf))

	entries := readNewc(t, buf.Bytes())
	var names []string
	byName := map[string]cpioEntry{}
	for _, e := range entries {
		names = append(names, e.name)
		byName[e.name] = e
	}
	// Directories come first, each parent before its children.
	require.Equal(t, []string{"bin", "dev", "proc", "usr", "usr/bin", "bin/sh", "dev/console", "init", "usr/bin/tool"}, names)
	require.Equal(t, uint32(cpioModeDir|0o755), byName["usr/bin"].mode)
	require.Equal(t, uint32(cpioModeFile|0o755), byName["usr/bin/tool"].mode)
	require.Equal(t, []byte("abcde"), byName["usr/bin/tool"].data)
	require.Equal(t, uint32(cpioModeSymlink|0o777), byName["bin/sh"].mode)
	require.Equal(t, []byte("busybox"), byName["bin/sh"].data)
	require.Equal(t, uint32(cpioModeChar|0o600), byName["dev/console"].mode)
	require.Equal(t, [2]uint32{5, 1}, [2]uint32{byName["dev/console"].rdevMajor, byName["dev/console"].rdevMinor})
}

func TestTreeLaterFileReplacesEarlier(t *testing.T) {
	tr := newTree()
	tr.File("etc/x", 0o644, []byte("old"))
	tr.File("etc/x", 0o644, []byte("new"))
	var buf bytes.Buffer
	require.NoError(t, tr.Write(&buf))
	entries := readNewc(t, buf.Bytes())
	require.Len(t, entries, 2)
	require.Equal(t, []byte("new"), entries[1].data)
}
