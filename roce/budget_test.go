package roce

import (
	"testing"
	"time"
)

const us = time.Microsecond

// A thread that never sleeps runs raised for burst/(1-share), then rests
// until half the burst is earned back at share.
func TestBudgetBoundsContinuousWork(t *testing.T) {
	b := newBudget(1000*us, 50)
	b.start(0)
	if b.spent(1999 * us) {
		t.Fatal("spent before 2 ms of continuous work with 1 ms of tokens earning at 50 %")
	}
	if !b.spent(2000 * us) {
		t.Fatal("not spent after 2 ms of continuous work")
	}
	b.stop(2000 * us)
	if b.allows(2999 * us) {
		t.Fatal("raised again before half the burst came back (1 ms at 50 %)")
	}
	if !b.allows(3000 * us) {
		t.Fatal("not raised again once half the burst came back")
	}
}

// Resting holds even after a short stop: the thread is lowered until the
// tokens are back, not until its next sleep.
func TestBudgetRestOutlastsShortSleep(t *testing.T) {
	b := newBudget(1000*us, 50)
	b.start(0)
	if !b.spent(3000 * us) {
		t.Fatal("not spent")
	}
	b.stop(3000 * us)
	b.start(3010 * us)
	if !b.spent(3020 * us) {
		t.Fatal("a 10 µs sleep ended the rest")
	}
}

// Work in short runs between sleeps, at under the share on average, never
// spends the budget however long it goes on.
func TestBudgetShortRunsNeverSpend(t *testing.T) {
	b := newBudget(1000*us, 50)
	now := time.Duration(0)
	for range 100000 {
		b.start(now)
		now += 10 * us // a round trip's work
		if b.spent(now) {
			t.Fatalf("spent at %v by 10 µs runs between 13 µs sleeps", now)
		}
		b.stop(now)
		now += 13 * us
	}
}

// Work above the share, in runs too short for any one to exhaust the
// burst, still spends it, and the raised fraction over a long time is the
// share.
func TestBudgetBoundsShareOverTime(t *testing.T) {
	b := newBudget(1000*us, 50)
	now := time.Duration(0)
	raised := time.Duration(0)
	for range 100000 {
		if b.allows(now) {
			b.start(now)
			now += 90 * us
			raised += 90 * us
			b.spent(now)
			b.stop(now)
		} else {
			now += 90 * us // lowered: the scheduler's share, not counted
		}
		now += 10 * us
	}
	if pct := 100 * raised / now; pct > 51 || pct < 45 {
		t.Fatalf("raised %d%% of the time; want about 50%%", pct)
	}
}

// The tokens never exceed the burst, however long the thread slept.
func TestBudgetCapsTokens(t *testing.T) {
	b := newBudget(1000*us, 50)
	b.stop(0)
	b.start(time.Hour)
	if b.spent(time.Hour + 1999*us) {
		t.Fatal("spent early")
	}
	if !b.spent(time.Hour + 2000*us) {
		t.Fatal("an hour's sleep gave more than the burst")
	}
}
