package redisconn

import (
	"strconv"
	"sync"
)

// Slot returns the Redis Cluster slot of a hash tag's content: its
// CRC16-CCITT (XModem) checksum modulo 16384.
func Slot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

var (
	slotTagsOnce sync.Once
	slotTags     [16384]uint32
)

// SlotTag returns a hash tag whose slot is slot: the smallest decimal
// number whose CRC16 falls in it. Every client derives the same tags, so
// a key named by the tag (a fence key shared by the names of a slot) is
// the same for all of them; changing this rule changes those keys. The
// table is built once per process, on first use (about 200,000 checksums
// of short strings).
func SlotTag(slot uint16) string {
	slotTagsOnce.Do(func() {
		var have [16384]bool
		left := len(have)
		var buf []byte
		for i := uint32(0); left > 0; i++ {
			buf = strconv.AppendUint(buf[:0], uint64(i), 10)
			s := Slot(string(buf))
			if !have[s] {
				have[s] = true
				slotTags[s] = i
				left--
			}
		}
	})
	return strconv.FormatUint(uint64(slotTags[slot]), 10)
}
