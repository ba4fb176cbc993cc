package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestGetopt walks command lines as getopt(3) would with rping's
// optstring.
func TestGetopt(t *testing.T) {
	walk := func(args ...string) []string {
		g := newGetopt("a:I:Pp:C:S:t:scvVdq", args)
		var got []string
		for {
			opt, arg, ok := g.next()
			if !ok {
				return got
			}
			got = append(got, string(opt)+arg)
		}
	}
	assert.Equal(t, []string{"c", "v", "V", "d", "a10.0.0.1", "C5"}, walk("-cvVd", "-a", "10.0.0.1", "-C5"))
	assert.Equal(t, []string{"s", "S64"}, walk("-sS", "64"))
	assert.Equal(t, []string{"s", "v"}, walk("stray", "-s", "word", "-v"))
	assert.Equal(t, []string{"s"}, walk("-s", "--", "-v"))
	assert.Equal(t, []string{"c", "?"}, walk("-c", "-a"))
	assert.Equal(t, []string{"?", "s"}, walk("-x", "-s"))
	assert.Equal(t, []string{"c", "?", "v"}, walk("-cxv"))
	assert.Empty(t, walk("-"))
}

func TestAtoi(t *testing.T) {
	for s, want := range map[string]int{"64": 64, " 12x": 12, "-3": -3, "+7": 7, "x": 0, "": 0} {
		assert.Equal(t, want, atoi(s), "%q", s)
	}
}
