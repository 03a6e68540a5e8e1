package redisconn

import "testing"

func TestSlotTag(t *testing.T) {
	// The slot of "foo" as Redis computes it (CLUSTER KEYSLOT foo).
	if s := Slot("foo"); s != 12182 {
		t.Fatalf("Slot(foo) = %d, want 12182", s)
	}
	for slot := range uint16(16384) {
		if got := Slot(SlotTag(slot)); got != slot {
			t.Fatalf("Slot(SlotTag(%d)) = %d", slot, got)
		}
	}
}
