package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// TestCongestionFlags checks that the congestion control flags reach the
// device's configuration, in the daemon's and (prefixed) the tools' form,
// and that nonsense is refused.
func TestCongestionFlags(t *testing.T) {
	parse := func(prefix string, args ...string) (verbs.Config, error) {
		var o congestionOptions
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.define(fs, prefix)
		if err := fs.Parse(args); err != nil {
			return verbs.Config{}, err
		}
		var cfg verbs.Config
		err := o.apply(&cfg)
		return cfg, err
	}
	cfg, err := parse("")
	require.NoError(t, err)
	assert.Equal(t, roce.ECNECT0, cfg.ECN)
	assert.Equal(t, roce.DefaultCNPDSCP, cfg.CNPDSCP)
	assert.Equal(t, ibtransport.DefaultCongestionConfig(), cfg.Congestion, "the flags' defaults are ConnectX's")
	assert.False(t, cfg.RxeFlushICRC, "IBA's FLUSH ICRC unless asked")
	cfg, err = parse("", "--rxe-flush-icrc")
	require.NoError(t, err)
	assert.True(t, cfg.RxeFlushICRC)
	cfg, err = parse("softnic-", "--softnic-rxe-flush-icrc")
	require.NoError(t, err)
	assert.True(t, cfg.RxeFlushICRC)

	cfg, err = parse("softnic-", "--softnic-ecn=off", "--softnic-cnp-dscp=0", "--softnic-cc-off", "--softnic-line-rate=1000",
		"--softnic-rpg-ai-rate=40", "--softnic-rpg-hai-rate=0.2G", "--softnic-rpg-min-rate=50k", "--softnic-rpg-time-reset=55us", "--softnic-rpg-threshold=5",
		"--softnic-dce-tcp-g=1020", "--softnic-dce-tcp-rtt=55us", "--softnic-rpg-byte-reset=10485760", "--softnic-cnp-interval=50us", "--softnic-rpg-hai-multiplied")
	require.NoError(t, err)
	assert.Equal(t, roce.ECNNotECT, cfg.ECN)
	assert.Equal(t, -1, cfg.CNPDSCP, "DSCP 0 asked for")
	c := cfg.Congestion
	assert.True(t, c.NPOff && c.RPOff)
	assert.Equal(t, uint64(1e9), c.LineRate)
	// Without --line-rate an interface's speed is the line rate; one that
	// reports none keeps the default.
	assert.Equal(t, rateFlag(ibtransport.DefaultCongestionConfig().LineRate), congestion.forInterface("no-such-interface").lineRate)
	given := congestionOptions{lineRate: 1e9, lineRateSet: true}
	assert.Equal(t, rateFlag(1e9), given.forInterface("lo").lineRate)
	assert.Equal(t, uint64(40e6), c.AIRate)
	assert.Equal(t, uint64(200e6), c.HAIRate)
	assert.Equal(t, uint64(50e3), c.MinRate)
	assert.Equal(t, 55*time.Microsecond, c.TimeReset)
	assert.Equal(t, 55*time.Microsecond, c.AlphaPeriod)
	assert.Equal(t, 50*time.Microsecond, c.CNPInterval)
	assert.Equal(t, 5, c.Threshold)
	assert.Equal(t, uint16(1020), c.G)
	assert.Equal(t, uint64(10<<20), c.ByteReset)
	assert.True(t, c.MultipliedHAI)

	for _, bad := range [][]string{{"-ecn=ce"}, {"-cnp-dscp=64"}, {"-dce-tcp-g=2000"}, {"-rpg-min-dec-fac=101"},
		{"-line-rate=1", "-rpg-min-rate=2"}, {"-rpg-ai-rate=5x"}, {"-rpg-ai-rate=-1"}, {"-initial-alpha-value=1024"}} {
		_, err := parse("", bad...)
		assert.Error(t, err, "%v", bad)
	}
}
