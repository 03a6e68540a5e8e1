package zookeeper

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

// escape turns a lock name into one ZooKeeper path component: ASCII
// letters, digits, '-', '_', '.' and '~' stay as they are, every other byte
// is written %XX, and the names "." and ".." have their dots escaped. So
// "billing/nightly" is the node "billing%2Fnightly".
func escape(name string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(name)+8)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	s := string(b)
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
	// The shape of a request of a weighted kind or an election (see
	// weighted.go); absent from a mutex's node.
	Kind   dlock.Kind `json:"kind,omitempty"`
	Limit  int        `json:"limit,omitempty"`
	Weight int        `json:"weight,omitempty"`
	Value  string     `json:"value,omitempty"`
}

// encodeData writes a lock child's data. An owner of plain characters
// (every default owner) is written directly, in the very bytes that
// json.Marshal writes, without its reflection.
func encodeData(owner string, count int) []byte {
	if !plainJSON(owner) {
		b, _ := json.Marshal(nodeData{Owner: owner, Count: count})
		return b
	}
	b := make([]byte, 0, len(owner)+len(dataHead)+len(dataMid)+8)
	b = append(append(append(b, dataHead...), owner...), dataMid...)
	return append(strconv.AppendInt(b, int64(count), 10), '}')
}

const (
	dataHead = `{"owner":"`
	dataMid  = `","count":`
)

// plainJSON reports whether s is printable ASCII that json.Marshal writes
// as it is (no quote, backslash, or HTML character that it escapes).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// parsePlain reads data that encodeData wrote directly: owner of plain
// characters and a count of at least 1 without leading zeros. ok is false
// for anything else, which is then read by encoding/json.
func parsePlain(b []byte) (d nodeData, ok bool) {
	s := string(b)
	rest, found := strings.CutPrefix(s, dataHead)
	if !found {
		return d, false
	}
	owner, num, found := strings.Cut(rest, dataMid)
	num, closed := strings.CutSuffix(num, "}")
	if !found || !closed || owner == "" || !plainJSON(owner) || len(num) == 0 || len(num) > 9 || num[0] < '1' || num[0] > '9' {
		return d, false
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return d, false
	}
	return nodeData{Owner: owner, Count: n}, true
}

// parseData reads a lock child's data strictly, for the holder's node that
// an acquisition or Inspect looks at: anything but dlock's JSON with an
// owner and a count of at least 1 is foreign data, and so is a node that
// is not ephemeral (dlock's nodes live with their session; any other
// would hold the lock for ever). It says what is wrong.
func parseData(b []byte, st *zk.Stat) (nodeData, string) {
	d, ok := parsePlain(b)
	var err error
	if !ok {
		err = json.Unmarshal(b, &d)
	}
	switch {
	case err != nil:
		return d, fmt.Sprintf("its content %s is not dlock's JSON", quoteCut(b))
	case d.Owner == "":
		return d, "it names no owner"
	case d.Count < 1:
		return d, fmt.Sprintf("its count %d is below 1", d.Count)
	case st != nil && st.EphemeralOwner == 0:
		return d, "it is not ephemeral"
	}
	return d, ""
}

// quoteCut quotes b, cut to a readable length, for a message.
func quoteCut(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:61])) + "..."
	}
	return strconv.Quote(string(b))
}

func decodeData(b []byte) nodeData {
	if d, ok := parsePlain(b); ok {
		return d
	}
	var d nodeData
	if json.Unmarshal(b, &d) != nil || d.Count < 1 {
		d.Count = 1
	}
	return d
}
