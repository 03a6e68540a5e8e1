package sqllock

import (
	"fmt"
	"os"
	"sync"
)

var counts sync.Map

func count(q string) {
	k := q
	if len(k) > 40 {
		k = k[:40]
	}
	v, _ := counts.LoadOrStore(k, new(int64))
	countMu.Lock()
	*v.(*int64)++
	countMu.Unlock()
}

var countMu sync.Mutex

func DumpCounts() {
	counts.Range(func(k, v any) bool { fmt.Fprintf(os.Stderr, "%8d %q\n", *v.(*int64), k); return true })
}
