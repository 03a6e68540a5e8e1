package sqllock

import (
	"context"
	"strings"
	"sync"
	"time"
)

// beats keeps the queue rows of an engine's fair waiters alive: one
// statement per beatChunk waiters every third of the waiter timeout,
// sent by whichever of them finds the beat due first, rather than one
// statement per waiter. No goroutine is involved: a waiting fair waiter
// wakes when its beat is due anyway (see waiter.bound).
type beats struct {
	run sync.Mutex // held while a beat is sent: one at a time
	mu  sync.Mutex // guards ws
	ws  map[*waiter]*beatState
}

// beatState is what beats knows of one fair waiter.
type beatState struct {
	seq  int64
	sent time.Time // send time of the last refresh of the row
	// solo says the last shared beat did not refresh every row it named:
	// the waiter refreshes its own row (queueing again if it died).
	solo bool
}

// beatChunk is the most queue rows one beat statement names.
const beatChunk = 256

// set records that w's queue row seq was refreshed (or made) at sent.
func (b *beats) set(w *waiter, seq int64, sent time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ws == nil {
		b.ws = make(map[*waiter]*beatState)
	}
	b.ws[w] = &beatState{seq: seq, sent: sent}
}

// drop forgets w.
func (b *beats) drop(w *waiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.ws, w)
}

// of returns when w's row was last refreshed, and whether w must refresh
// it on its own.
func (b *beats) of(w *waiter) (sent time.Time, solo bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := b.ws[w]; st != nil {
		return st.sent, st.solo
	}
	return time.Time{}, true
}

// beat refreshes the queue row of w, and those of every other fair waiter
// of the engine with it, unless a beat sent since w's last became due
// covered it. A row that died (its process was paused past the waiter
// timeout, and it was swept) is not revived: its waiter queues again at
// its next look (see waiter.next).
func (e *Engine) beat(ctx context.Context, w *waiter) error {
	b := &e.beats
	b.run.Lock()
	defer b.run.Unlock()
	if sent, solo := b.of(w); solo || time.Since(sent) < e.wttl/3 {
		return nil
	}
	type item struct {
		w   *waiter
		seq int64
	}
	b.mu.Lock()
	items := make([]item, 0, len(b.ws))
	for ow, st := range b.ws {
		items = append(items, item{ow, st.seq})
	}
	b.mu.Unlock()
	for len(items) > 0 {
		chunk := items[:min(len(items), beatChunk)]
		items = items[len(chunk):]
		seqs := make([]int64, len(chunk))
		for i, it := range chunk {
			seqs[i] = it.seq
		}
		sent := time.Now()
		n, err := e.beatRows(ctx, seqs)
		if err != nil {
			return err
		}
		b.mu.Lock()
		for _, it := range chunk {
			if st := b.ws[it.w]; st != nil && st.seq == it.seq {
				if n == int64(len(chunk)) {
					st.sent = sent
				} else {
					st.solo = true
				}
			}
		}
		b.mu.Unlock()
	}
	return nil
}

// beatRows refreshes the live queue rows seqs in one statement and
// returns how many it refreshed. The statement names a power of two of
// rows (the last repeated), so that few texts are prepared.
func (e *Engine) beatRows(ctx context.Context, seqs []int64) (int64, error) {
	size := 1
	for size < len(seqs) {
		size *= 2
	}
	args := make([]any, 0, 1+size)
	args = append(args, ttlMillis(e.wttl))
	for k := range size {
		args = append(args, seqs[min(k, len(seqs)-1)])
	}
	q, ok := e.beatSQL.Load(size)
	if !ok {
		q = Bind(e.d, e.table)(`UPDATE {W} SET expires_at = {NOW} + ? WHERE expires_at > {NOW} AND seq IN (?` +
			strings.Repeat(", ?", size-1) + `)`)
		e.beatSQL.Store(size, q)
	}
	var n int64
	err := e.write(ctx, func(ctx context.Context) error {
		res, err := e.pool.ExecContext(ctx, q.(string), args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
