package main

import (
	"bytes"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBuildCommit: the Makefile's commit wins, then the VCS stamp (dirty
// marked), then "unknown".
func TestBuildCommit(t *testing.T) {
	stamp := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	clean := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}}
	assert.Equal(t, "fromldflags", buildCommit("fromldflags", stamp))
	assert.Equal(t, "abc123-dirty", buildCommit("unknown", stamp))
	assert.Equal(t, "abc123", buildCommit("unknown", clean))
	assert.Equal(t, "unknown", buildCommit("unknown", &debug.BuildInfo{}))
	assert.Equal(t, "unknown", buildCommit("unknown", nil))
}

// TestVersionCommand prints one line with the version; extra words are a
// usage error.
func TestVersionCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"version"}, &out, &errOut))
	assert.Regexp(t, `^softnic \S+ \(commit \S+, go\S+\)\n$`, out.String())
	require.Equal(t, 2, run([]string{"version", "extra"}, &out, &errOut))
	require.Equal(t, 0, run([]string{"version", "-h"}, &out, &errOut))
}
