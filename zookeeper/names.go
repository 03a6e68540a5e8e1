package zookeeper

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// escape turns a lock name into one ZooKeeper path component: ASCII
// letters, digits, '-', '_', '.' and '~' stay as they are, every other byte
// is written %XX, and the names "." and ".." have their dots escaped. So
// "billing/nightly" is the node "billing%2Fnightly".
func escape(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	s := b.String()
	if s == "." || s == ".." {
		s = strings.Repeat("%2E", len(s))
	}
	return s
}

// unescape reverses escape; ok is false for a node name escape cannot have
// made.
func unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, s != "" && s != "." && s != ".."
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), true
}

// The children of a lock's container are named like Curator's protected
// nodes: "_c_" + 32 hex digits of a random id + "-lock-" + the sequence
// number the server appends (10 digits).
const (
	protectedPrefix = "_c_"
	lockMarker      = "-lock-"
	guidLen         = 32
)

// childGUID returns the random id in a child's name, or "".
func childGUID(name string) string {
	if !strings.HasPrefix(name, protectedPrefix) || len(name) < len(protectedPrefix)+guidLen {
		return ""
	}
	return name[len(protectedPrefix) : len(protectedPrefix)+guidLen]
}

// childSeq returns the sequence number of a lock child, or -1 for a node
// that is not one.
func childSeq(name string) int64 {
	i := strings.LastIndex(name, lockMarker)
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(name[i+len(lockMarker):], 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// nodeData is what a lock child holds: its owner and, once it holds the
// lock, how many times that owner holds it.
type nodeData struct {
	Owner string `json:"owner"`
	Count int    `json:"count"`
}

func encodeData(owner string, count int) []byte {
	b, _ := json.Marshal(nodeData{Owner: owner, Count: count})
	return b
}

func decodeData(b []byte) nodeData {
	var d nodeData
	if json.Unmarshal(b, &d) != nil || d.Count < 1 {
		d.Count = 1
	}
	return d
}
