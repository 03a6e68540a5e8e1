package dur

import (
	"math"
	"testing"
	"time"
)

func TestCeil(t *testing.T) {
	for _, tc := range []struct {
		d, unit time.Duration
		want    int64
	}{
		{0, time.Millisecond, 0},
		{-time.Second, time.Millisecond, 0},
		{1, time.Millisecond, 1},
		{time.Millisecond, time.Millisecond, 1},
		{time.Millisecond + 1, time.Millisecond, 2},
		{1500*time.Millisecond + 1, time.Second, 2},
		{math.MaxInt64, time.Millisecond, math.MaxInt64/int64(time.Millisecond) + 1},
		{math.MaxInt64, time.Second, math.MaxInt64/int64(time.Second) + 1},
		{math.MaxInt64, 1, math.MaxInt64},
	} {
		if got := Ceil(tc.d, tc.unit); got != tc.want {
			t.Errorf("Ceil(%d, %v) = %d, want %d", int64(tc.d), tc.unit, got, tc.want)
		}
	}
}

func TestSum(t *testing.T) {
	if got := Sum(time.Second, time.Millisecond); got != time.Second+time.Millisecond {
		t.Errorf("Sum(1s, 1ms) = %v", got)
	}
	if got := Sum(math.MaxInt64, time.Second); got != math.MaxInt64 {
		t.Errorf("Sum(math.MaxInt64, 1s) = %d, want math.MaxInt64", int64(got))
	}
}
