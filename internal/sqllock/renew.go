package sqllock

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// renewChunk is the most holds one renewal statement of RenewBatch
// names: 3 parameters each stay far below every database's limit (SQLite's
// is 32,766), and the statement's text below MySQL's max_allowed_packet.
const renewChunk = 256

// RenewBatch renews many holds: those with the same TTL in multi-row
// UPDATEs of up to renewChunk holds, one round trip each, so that a
// Client holding 10,000 leases sends 40 statements per renewal period,
// not 10,000. A statement that renewed fewer rows than it named is
// followed by a Renew of each of its holds, to tell which were lost. See
// [dlock.BatchRenewer].
func (e *Engine) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	if err := e.checkOpen(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if slices.ContainsFunc(rs, func(r dlock.Renewal) bool { return r.Hold.Kind != dlock.KindMutex }) {
		return e.renewMixed(ctx, rs)
	}
	for _, chunk := range renewChunks(rs) {
		n, err := e.renewMany(ctx, rs, chunk)
		switch {
		case err != nil:
			for _, i := range chunk {
				errs[i] = e.wrap(err)
			}
		case n < int64(len(chunk)):
			for _, i := range chunk {
				errs[i] = e.Renew(ctx, rs[i].Hold, rs[i].TTL)
			}
		}
	}
	return errs
}

// renewChunks groups the indexes of rs by TTL, in order of first
// appearance, into chunks of at most renewChunk.
func renewChunks(rs []dlock.Renewal) [][]int {
	var (
		order  []time.Duration
		byTTL  = map[time.Duration][]int{}
		chunks [][]int
	)
	for i, r := range rs {
		if _, ok := byTTL[r.TTL]; !ok {
			order = append(order, r.TTL)
		}
		byTTL[r.TTL] = append(byTTL[r.TTL], i)
	}
	for _, ttl := range order {
		idx := byTTL[ttl]
		for len(idx) > 0 {
			n := min(len(idx), renewChunk)
			chunks = append(chunks, idx[:n])
			idx = idx[n:]
		}
	}
	return chunks
}

// renewMany renews the holds rs[i] for i in chunk, which share a TTL, in
// one UPDATE, and returns the number of rows it renewed. The statement
// names a power of two of holds, the last one repeated as padding, so
// that a handful of prepared statements serve every chunk size.
func (e *Engine) renewMany(ctx context.Context, rs []dlock.Renewal, chunk []int) (int64, error) {
	size := 1
	for size < len(chunk) {
		size *= 2
	}
	args := make([]any, 0, 1+3*size)
	args = append(args, ttlMillis(rs[chunk[0]].TTL))
	for k := range size {
		h := rs[chunk[min(k, len(chunk)-1)]].Hold
		args = append(args, h.Name, h.Owner, int64(h.Token))
	}
	var n int64
	err := e.write(ctx, func(ctx context.Context) error {
		res, err := e.pool.ExecContext(ctx, e.renewSQL(size), args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// renewSQL returns the UPDATE that renews size holds: the renewal of
// Renew, for any of the (name, owner, token) triples given.
func (e *Engine) renewSQL(size int) string {
	if q, ok := e.renews.Load(size); ok {
		return q.(string)
	}
	var b strings.Builder
	b.WriteString(`UPDATE {L} AS l SET expires_at = {NOW} + ?
WHERE l.holds > 0 AND l.expires_at > {NOW} AND (`)
	for k := range size {
		if k > 0 {
			b.WriteString("\n\tOR ")
		}
		b.WriteString("(l.name = ? AND l.owner = ? AND l.token = ?)")
	}
	b.WriteString(")")
	q := Bind(e.d, e.table)(b.String())
	e.renews.Store(size, q)
	return q
}

// renewMixed is RenewBatch of renewals some of which are of weighted
// holds: those are renewed one by one (a transaction each), the mutexes'
// as a batch.
func (e *Engine) renewMixed(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	var mutexes []dlock.Renewal
	var at []int
	for i, r := range rs {
		if r.Hold.Kind != dlock.KindMutex {
			errs[i] = e.Renew(ctx, r.Hold, r.TTL)
			continue
		}
		mutexes, at = append(mutexes, r), append(at, i)
	}
	if len(mutexes) > 0 {
		for k, err := range e.RenewBatch(ctx, mutexes) {
			errs[at[k]] = err
		}
	}
	return errs
}
