package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// Weighted grants (semaphores and read-write locks) in lease mode; see
// the package doc's "Semaphores and read-write locks". Every operation is
// one transaction that locks the name's lease row (after its fence
// bucket, where writes are concurrent) and decides in Go on what it read
// in that transaction: the grant rule is then one atomic step.

var (
	_ dlock.Granter    = (*Backend)(nil)
	_ dlock.Downgrader = (*Backend)(nil)
	_ dlock.Proclaimer = (*Backend)(nil)
)

// HoldersTable returns the name of the holders table of lease table
// table: one row per holder of a weighted name.
func HoldersTable(table string) string { return table + "_holders" }

// holdersCheck selects no row, but every column dlock uses, from the
// holders table.
func holdersCheck(table string) string {
	return `SELECT name, owner, weight, holds, token, expires_at, value FROM ` + HoldersTable(table) + ` WHERE 1 = 0`
}

// holdersCheckV1 is holdersCheck of a holders table made before elections
// (without the value column), which Migrate completes.
func holdersCheckV1(table string) string {
	return `SELECT name, owner, weight, holds, token, expires_at FROM ` + HoldersTable(table) + ` WHERE 1 = 0`
}

// markPrefix starts the owner of a weighted name's lease row. It is
// longer than any owner a Client gives (at most dlock.MaxNameLen bytes),
// so no holder of a mutex can have it. The kind and the limit follow it.
var markPrefix = "\x1fdlock weighted\x1f" + strings.Repeat(".", dlock.MaxNameLen-15)

// mark returns the owner of the lease row of a name used as kind with
// limit.
func mark(kind dlock.Kind, limit int) string {
	return markPrefix + strconv.Itoa(int(kind)) + "/" + strconv.Itoa(limit)
}

// isMark reports whether owner is a weighted name's mark.
func isMark(owner string) bool { return strings.HasPrefix(owner, markPrefix) }

// parseMark returns the kind and limit of a mark.
func parseMark(owner string) (dlock.Kind, int, bool) {
	k, l, ok := strings.Cut(strings.TrimPrefix(owner, markPrefix), "/")
	kind, err1 := strconv.Atoi(k)
	limit, err2 := strconv.Atoi(l)
	if !ok || err1 != nil || err2 != nil || !weightedKind(dlock.Kind(kind), limit) {
		return 0, 0, false
	}
	return dlock.Kind(kind), limit, true
}

// weightedKind reports whether the weighted path grants kind with limit:
// a semaphore or read-write lock of 1..MaxLimit, or an election (limit 1).
func weightedKind(kind dlock.Kind, limit int) bool {
	switch kind {
	case dlock.KindSemaphore, dlock.KindRWMutex:
		return limit >= 1 && limit <= dlock.MaxLimit
	case dlock.KindElection:
		return limit == 1
	}
	return false
}

// markConflict is the refusal of a mutex request on a name whose lease row
// has owner, a mark; nil if owner is no mark.
func markConflict(owner string) error {
	if !isMark(owner) {
		return nil
	}
	kind, limit, ok := parseMark(owner)
	if !ok {
		return errorf(dlock.ErrForeignData, "the lease row's owner starts as dlock's mark of a weighted name but %s is not one", show(owner))
	}
	return dlock.Conflict(kind, limit, dlock.Request{Kind: dlock.KindMutex, Limit: 1})
}

// wstatements are the statements of weighted grants; see newWStatements.
type wstatements struct {
	lockBucket string // name. Locks the name's fence row (ConcurrentWrites).
	ensure     string // name, name. A free lease row if none, token its bucket's mark.
	lease      string // name. owner, token, holds, expires_at, now; locked.
	holders    string // name. owner, weight, holds, token, expires_at of every holder row.
	queue      string // name ×4. First live waiter's seq and expiry, live waiters, foreign waiter rows.
	expired    string // name. Deletes the name's expired holder rows.
	insert     string // name, owner, weight, token, ttl, value.
	proclaim   string // value, name, owner, token. Sets a live holder's value.
	reenter    string // ttl, name, owner.
	setLease   string // owner, token, name, name. Expiry: the latest of the live holders', else 0.
	delLease   string // name.
	waiting    string // name. 1 if any waiter row has the name.
	live       string // name. The number of holder rows.
	renewLease string // ttl, name, token.
	renewHold  string // ttl, name, owner, token.
	decr       string // name, owner, token. A holder with holds > 1.
	drop       string // name, owner, token. A holder with holds 1.
	downgrade  string // weight, name, owner, token, weight.
	look       string // name. The look of a waiter: see wlook.
	sweep      string // none. Deletes up to SweepBatch expired holder rows.
	expiredAny string // none. 1 if a holder row expired.
	wake       string // name; "" if the dialect has no Wake.
	// pin (FenceTx): none. Takes the metadata locks of every table a
	// weighted transaction writes, and no row lock, as its first
	// statement: taken one by one, a transaction that waits for a row
	// lock while a Migrate's DDL waits for its metadata lock would hold
	// up the holder of that row lock, which needs a metadata lock behind
	// the DDL's — a cycle that MySQL does not detect.
	pin string
}

// begin starts a weighted transaction on c: see wstatements.pin.
func (e *Engine) begin(ctx context.Context, c *sql.Conn) error {
	if e.w.pin == "" {
		return nil
	}
	_, err := queryOne(ctx, c, e.w.pin, nil)
	return err
}

func newWStatements(d Dialect, table string) wstatements {
	r := Bind(d, table)
	h := func(q string) string { return r(strings.ReplaceAll(q, "{H}", HoldersTable(table))) }
	lock := ""
	if d.ConcurrentWrites {
		lock = " FOR UPDATE"
	}
	ins, tail := d.InsertIgnore, ""
	if ins == "" {
		ins, tail = "INSERT INTO", " ON CONFLICT (name) DO NOTHING"
	}
	live := `w.name = ? AND w.expires_at > {NOW} AND {WOK}`
	var s wstatements
	s.lockBucket = r(LockBucketSQL(d))
	s.ensure = r(ins + ` {L} (name, owner, holds, token, expires_at)
SELECT ?, '', 0, f.mark, 0 FROM {F} f WHERE f.bucket = ` + d.Bucket("?") + tail)
	s.lease = r(`SELECT owner, token, holds, expires_at, {NOW} FROM {L} WHERE name = ?` + lock)
	s.holders = h(`SELECT owner, weight, holds, token, expires_at FROM {H} WHERE name = ? ORDER BY token`)
	s.queue = r(`SELECT (SELECT MIN(w.seq) FROM {W} w WHERE ` + live + `),
	(SELECT MIN(w.expires_at) FROM {W} w WHERE ` + live + `),
	(SELECT COUNT(*) FROM {W} w WHERE ` + live + `),
	(SELECT COUNT(*) FROM {W} w WHERE w.name = ? AND NOT {WOK})`)
	s.expired = h(`DELETE FROM {H} WHERE name = ? AND expires_at <= {NOW}`)
	s.insert = h(`INSERT INTO {H} (name, owner, weight, holds, token, expires_at, value) VALUES (?, ?, ?, 1, ?, {NOW} + ?, ?)`)
	s.proclaim = h(`UPDATE {H} SET value = ? WHERE name = ? AND owner = ? AND token = ? AND expires_at > {NOW}`)
	s.reenter = h(`UPDATE {H} SET holds = holds + 1, expires_at = {MAX}(expires_at, {NOW} + ?) WHERE name = ? AND owner = ?`)
	s.setLease = h(`UPDATE {L} SET owner = ?, holds = 1, token = ?,
	expires_at = COALESCE((SELECT MAX(h.expires_at) FROM {H} h WHERE h.name = ? AND h.expires_at > {NOW}), 0)
WHERE name = ?`)
	s.delLease = r(`DELETE FROM {L} WHERE name = ?`)
	s.waiting = r(`SELECT 1 FROM {W} w WHERE w.name = ? LIMIT 1`)
	s.live = h(`SELECT COUNT(*) FROM {H} WHERE name = ?`)
	s.renewLease = r(`UPDATE {L} SET expires_at = {MAX}(expires_at, {NOW} + ?)
WHERE name = ? AND substr(owner, 1, ` + strconv.Itoa(len(markPrefix)) + `) = '` + markPrefix + `' AND token >= ?`)
	s.renewHold = h(`UPDATE {H} SET expires_at = {NOW} + ? WHERE name = ? AND owner = ? AND token = ? AND expires_at > {NOW}`)
	s.decr = h(`UPDATE {H} SET holds = holds - 1 WHERE name = ? AND owner = ? AND token = ? AND holds > 1 AND expires_at > {NOW}`)
	s.drop = h(`DELETE FROM {H} WHERE name = ? AND owner = ? AND token = ? AND holds = 1 AND expires_at > {NOW}`)
	s.downgrade = h(`UPDATE {H} SET weight = ? WHERE name = ? AND owner = ? AND token = ? AND expires_at > {NOW} AND weight >= ?`)
	s.look = h(`SELECT COALESCE(l.owner, ''), {NOW},
	(SELECT COALESCE(SUM(h.weight), 0) FROM {H} h WHERE h.name = k.name AND h.expires_at > {NOW}),
	(SELECT MIN(h.expires_at) FROM {H} h WHERE h.name = k.name AND h.expires_at > {NOW}),
	(SELECT MIN(w.seq) FROM {W} w WHERE w.name = k.name AND w.expires_at > {NOW} AND {WOK}),
	(SELECT MIN(w.expires_at) FROM {W} w WHERE w.name = k.name AND w.expires_at > {NOW} AND {WOK})
FROM (SELECT ? AS name) k LEFT JOIN {L} l ON l.name = k.name`)
	if d.DeleteLimit {
		s.sweep = h(`DELETE FROM {H} WHERE expires_at <= {NOW} LIMIT ` + strconv.Itoa(SweepBatch))
	} else {
		s.sweep = h(`DELETE FROM {H} WHERE expires_at <= {NOW} AND name IN (SELECT s.name FROM (SELECT h.name FROM {H} h WHERE h.expires_at <= {NOW} LIMIT ` +
			strconv.Itoa(SweepBatch) + `) s)`)
	}
	s.expiredAny = h(`SELECT 1 FROM {H} WHERE expires_at <= {NOW} LIMIT 1`)
	if d.Wake != nil {
		s.wake = r(d.Wake(table))
	}
	if d.FenceTx {
		s.pin = h(`SELECT 1 FROM {L}, {W}, {H}, {F} WHERE 1 = 0 FOR UPDATE`)
	}
	return s
}

// CanGrant implements [dlock.Granter]: lease mode grants semaphores,
// read-write locks and elections on a dialect with a holders table;
// session mode grants what its server's advisory lock can carry (see
// Sessions.CanGrant and the package doc).
func (b *Backend) CanGrant(kind dlock.Kind, limit int) error {
	if b.s != nil {
		return b.s.CanGrant(kind, limit)
	}
	return b.e.CanGrant(kind, limit)
}

// Proclaim implements [dlock.Proclaimer]: it replaces the value of the
// election hold h if h is still held, and watchers learn of it.
func (b *Backend) Proclaim(ctx context.Context, h dlock.Hold, value string) error {
	var err error
	if b.s != nil {
		err = b.s.Proclaim(ctx, h, value)
	} else {
		err = b.e.Proclaim(ctx, h, value)
	}
	if err == nil {
		b.e.changed(h.Name)
	}
	return err
}

// Proclaim sets the value of the live holder row of h: one UPDATE,
// checked by owner, token and expiry ([dlock.ErrLeaseLost] if it matches
// nothing). On PostgreSQL the holders table's trigger notifies watchers.
func (e *Engine) Proclaim(ctx context.Context, h dlock.Hold, value string) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	return e.proclaim(ctx, &e.pool, h, value)
}

// proclaim is Proclaim's UPDATE, run on q.
func (e *Engine) proclaim(ctx context.Context, q querier, h dlock.Hold, value string) error {
	if h.Kind != dlock.KindElection {
		return errorf(dlock.ErrInvalidOption, "a %s hold has no value", h.Kind)
	}
	var n int64
	err := e.writeName(ctx, h.Name, func(ctx context.Context) error {
		res, err := q.ExecContext(ctx, e.w.proclaim, value, h.Name, h.Owner, int64(h.Token))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return e.wrap(err)
	}
	if n == 0 {
		return e.wlost(ctx, h)
	}
	return nil
}

// Downgrade implements [dlock.Downgrader].
func (b *Backend) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	if b.s != nil {
		return b.s.Downgrade(ctx, h, weight)
	}
	err := b.e.Downgrade(ctx, h, weight)
	if err == nil {
		b.e.changed(h.Name)
	}
	return err
}

// CanGrant implements [dlock.Granter].
func (e *Engine) CanGrant(kind dlock.Kind, limit int) error {
	switch {
	case e.d.Weighted == nil:
		return fmt.Errorf("%s grants mutexes only, not a %s", e.d.Name, dlock.Shape(kind, limit))
	case kind == dlock.KindElection && limit != 1:
		return fmt.Errorf("an election has limit 1, not %d", limit)
	case kind != dlock.KindSemaphore && kind != dlock.KindRWMutex && kind != dlock.KindElection:
		return fmt.Errorf("%s does not grant a %s", e.d.Name, dlock.Shape(kind, limit))
	case limit < 1 || limit > dlock.MaxLimit:
		return fmt.Errorf("limit %d is outside [1, %d]", limit, dlock.MaxLimit)
	}
	return nil
}

// wholder is a holder row as read.
type wholder struct {
	owner                string
	weight, holds        int
	token                uint64
	expires              int64
	rawW, rawH, rawT, rE any
}

// wstate is what a weighted operation read of a name in its transaction.
type wstate struct {
	now      int64
	lease    lockState // the lease row (owner: a mark, a mutex holder, or "")
	kind     dlock.Kind
	limit    int
	shaped   bool      // the name has holders or waiters, of kind and limit
	holders  []wholder // live, in token order
	used     int       // their weights
	head     int64     // the first live waiter's seq; NoSeq if none
	queued   int       // live waiters
	queueExp int64
}

// readW reads name's state in c's transaction, its lease row locked: the
// row, its live holders (the expired ones are deleted) and its queue.
func (e *Engine) readW(ctx context.Context, c *sql.Conn, name string) (wstate, error) {
	var s wstate
	var r rawRow
	ok, err := queryOne(ctx, c, e.w.lease, []any{name}, &r.owner, &r.token, &r.holds, &r.expires, &s.now)
	if err != nil {
		return s, err
	}
	if !ok {
		return s, errors.New("the lease row vanished inside its transaction")
	}
	s.lease.exists = true
	var head, qexp sql.NullInt64
	if _, err := queryOne(ctx, c, e.w.queue, []any{name, name, name, name}, &head, &qexp, &s.queued, &r.badWaiters); err != nil {
		return s, err
	}
	s.lease.fault = e.checkRow(r, s.now, &s.lease)
	s.head = NoSeq
	if head.Valid {
		s.head = head.Int64
		s.queueExp = qexp.Int64
	}
	if s.lease.fault != "" {
		return s, nil
	}
	// The recorded shape.
	own := s.lease.owner
	switch {
	case isMark(own):
		k, l, ok := parseMark(own)
		if !ok {
			s.lease.fault = "owner " + show(own) + " starts as dlock's mark of a weighted name but is not one"
			return s, nil
		}
		s.kind, s.limit = k, l
	case own != "" && s.lease.remaining > 0 || s.queued > 0:
		// A mutex holds it, or mutex waiters queue (a weighted name's
		// waiters keep its mark).
		s.kind, s.limit, s.shaped = dlock.KindMutex, 1, true
		return s, nil
	}
	if _, err := c.ExecContext(ctx, e.w.expired, name); err != nil {
		return s, err
	}
	rows, err := c.QueryContext(ctx, e.w.holders, name)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var h wholder
		if err := rows.Scan(&h.owner, &h.rawW, &h.rawH, &h.rawT, &h.rE); err != nil {
			return s, err
		}
		if fault := s.checkHolder(&h, e.d.maxToken()); fault != "" {
			s.lease.fault = fmt.Sprintf("a row of %s for it: %s", HoldersTable(e.table), fault)
			return s, rows.Close()
		}
		if h.expires > s.now {
			s.holders = append(s.holders, h)
			s.used += h.weight
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if isMark(own) && s.used > s.limit {
		s.lease.fault = fmt.Sprintf("its holders hold %d, above its limit %d", s.used, s.limit)
	}
	s.shaped = isMark(own) && (len(s.holders) > 0 || s.queued > 0)
	return s, rows.Close()
}

// checkHolder reads a holder row's integers and returns what makes it
// foreign data, or "".
func (s *wstate) checkHolder(h *wholder, maxToken int64) string {
	w, okW := asInt(h.rawW)
	n, okH := asInt(h.rawH)
	t, okT := asInt(h.rawT)
	x, okE := asInt(h.rE)
	switch {
	case !okW || !okH || !okT || !okE:
		return fmt.Sprintf("owner %s: weight %s, holds %s, token %s, expires_at %s are not all integers", show(h.owner), show(h.rawW), show(h.rawH), show(h.rawT), show(h.rE))
	case h.owner == "":
		return "an empty owner"
	case w < 1 || w > dlock.MaxLimit || s.limit > 0 && int(w) > s.limit:
		return fmt.Sprintf("owner %s: weight %d is outside [1, %d]", show(h.owner), w, max(s.limit, 1))
	case n < 1 || n >= MaxHolds:
		return fmt.Sprintf("owner %s: holds %d is outside [1, %d]", show(h.owner), n, MaxHolds-1)
	case t < 1 || t >= maxToken || uint64(t) > s.lease.token:
		return fmt.Sprintf("owner %s: token %d is not one the name's counter (%d) gave", show(h.owner), t, s.lease.token)
	}
	h.weight, h.holds, h.token, h.expires = int(w), int(n), uint64(t), x
	return ""
}

// earliest returns the refusal of a request that does not fit or is not
// first: the holder whose lease ends first, what is held of what.
func (s *wstate) refusal() *dlock.HeldError {
	e := &dlock.HeldError{Queued: s.queued}
	var first *wholder
	for i := range s.holders {
		if h := &s.holders[i]; first == nil || h.expires < first.expires {
			first = h
		}
	}
	if first != nil {
		e.Holder = dlock.Holder{Owner: first.owner, Token: first.token, TTL: time.Duration(first.expires-s.now) * time.Millisecond}
	}
	if s.limit > 1 {
		e.Held, e.Limit = s.used, s.limit
	}
	return e
}

// wresult is the outcome of one weighted attempt.
type wresult struct {
	g       dlock.Grant
	granted bool
	seq     int64 // the queue row made for a refused waiting request
	refused error // the refusal (ErrNotAcquired) when not granted
}

// wattempt makes one attempt for req, whose queue row is seq (NoSeq: none),
// in one transaction: it refuses a kind or limit other than the name's,
// re-enters the owner's hold, grants if the request fits beside the live
// holders and no live waiter is queued before it, and otherwise refuses;
// a refused request that will wait and has no queue row gets one, and the
// name's mark records its kind and limit meanwhile.
func (e *Engine) wattempt(ctx context.Context, req dlock.Request, seq int64) (wresult, error) {
	var res wresult
	ttl := ttlMillis(req.TTL)
	err := e.writeName(ctx, req.Name, func(ctx context.Context) error {
		res = wresult{seq: seq}
		return e.tx(ctx, func(c *sql.Conn) error {
			if err := e.begin(ctx, c); err != nil {
				return err
			}
			if e.d.ConcurrentWrites {
				if _, err := c.ExecContext(ctx, e.w.lockBucket, req.Name); err != nil {
					return err
				}
			}
			if _, err := c.ExecContext(ctx, e.w.ensure, req.Name, req.Name); err != nil {
				return err
			}
			s, err := e.readW(ctx, c, req.Name)
			if err != nil {
				return err
			}
			if s.lease.fault != "" {
				return e.foreign(req.Name, s.lease.fault)
			}
			if s.shaped {
				if err := dlock.Conflict(s.kind, s.limit, req); err != nil {
					return err
				}
			}
			for _, h := range s.holders {
				if h.owner != req.Owner {
					continue
				}
				if req.Weight > h.weight {
					return fmt.Errorf("holds %d, asks %d: %w", h.weight, req.Weight, dlock.ErrUpgrade)
				}
				if _, err := c.ExecContext(ctx, e.w.reenter, ttl, req.Name, req.Owner); err != nil {
					return err
				}
				res.granted, res.g = true, dlock.Grant{Token: h.token, Count: h.holds + 1}
				return e.setLease(ctx, c, req, s.lease.token)
			}
			first := s.head == NoSeq || s.head == seq
			if s.used+req.Weight > req.Limit || !first {
				res.refused = s.refusal()
				if !first && s.used+req.Weight <= req.Limit && s.limit <= 1 {
					res.refused = errorf(dlock.ErrNotAcquired, "free, but %d fair waiter(s) are queued first", s.queued)
				}
				if !req.Wait || seq != NoSeq {
					return errRefused // roll back: nothing written
				}
				if res.seq, err = e.enqueue(ctx, c, req); err != nil {
					return err
				}
				return e.setLease(ctx, c, req, s.lease.token)
			}
			token := s.lease.token + 1
			if int64(token) >= e.d.maxToken() {
				return e.foreign(req.Name, fmt.Sprintf("token %d is at the top of the range", s.lease.token))
			}
			if seq != NoSeq {
				if _, err := c.ExecContext(ctx, e.q.dequeue, seq); err != nil {
					return err
				}
			}
			if _, err := c.ExecContext(ctx, e.w.insert, req.Name, req.Owner, req.Weight, int64(token), ttl, req.Value); err != nil {
				return err
			}
			if err := e.setLease(ctx, c, req, token); err != nil {
				return err
			}
			res.granted, res.g = true, dlock.Grant{Token: token, Count: 1}
			if s.queued > 0 && e.w.wake != "" {
				// The next waiter may fit too.
				_, err = c.ExecContext(ctx, e.w.wake, req.Name)
			}
			return err
		})
	})
	if errors.Is(err, errRefused) {
		err = nil
	}
	return res, err
}

// errRefused rolls back a refused attempt's transaction.
var errRefused = errors.New("refused")

// setLease writes the name's lease row: the mark of req's kind and limit,
// the token, and the latest expiry of the live holders.
func (e *Engine) setLease(ctx context.Context, c *sql.Conn, req dlock.Request, token uint64) error {
	_, err := c.ExecContext(ctx, e.w.setLease, mark(req.Kind, req.Limit), int64(token), req.Name, req.Name)
	return err
}

// wacquire is Acquire for a weighted kind.
func (e *Engine) wacquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if req.Limit < 1 || req.Weight < 1 || req.Weight > req.Limit {
		return dlock.Grant{}, nil, errorf(dlock.ErrInvalidOption, "weight %d of a limit of %d", req.Weight, req.Limit)
	}
	sent := time.Now()
	res, err := e.wattempt(ctx, req, NoSeq)
	if err != nil {
		if e.classify(err) == Other && e.checkQueries(ctx, holdersCheck(e.table)) != nil {
			// Check does not require it, so that mutexes keep working on
			// tables made before it existed.
			return dlock.Grant{}, nil, fmt.Errorf("the holders table %s of semaphores and read-write locks is missing or not dlock's (%w); create it with `dlock migrate` or Migrate", HoldersTable(e.table), e.wrap(err))
		}
		return dlock.Grant{}, nil, e.wrap(err)
	}
	if res.granted {
		e.maybeSweep(ctx)
		return res.g, nil, nil
	}
	if res.seq == NoSeq {
		return dlock.Grant{}, nil, res.refused
	}
	w := e.newWaiter(req, res.seq, sent)
	w.weighted = true
	return dlock.Grant{}, w, res.refused
}

// wacquireWaiter is the weighted waiter's next attempt.
func (w *waiter) wacquire(ctx context.Context) (dlock.Grant, error) {
	w.channels(true)
	res, err := w.e.wattempt(ctx, w.req, w.seq)
	if err != nil {
		return dlock.Grant{}, w.e.wrap(err)
	}
	if res.granted {
		w.end()
		w.e.local.signal(w.req.Name) // the next waiter here may fit too
		return res.g, nil
	}
	return dlock.Grant{}, res.refused
}

// wlook is a weighted waiter's look at its name.
type wlook struct {
	owner            string
	now, used        int64
	firstExp         sql.NullInt64 // of the holder whose lease ends first
	head, headExp    sql.NullInt64
	local, remote    <-chan struct{}
	remaining, qleft time.Duration
}

func (e *Engine) wlook(ctx context.Context, name string) (wlook, error) {
	var l wlook
	sctx, done := e.seeThrough(ctx)
	_, err := queryOne(sctx, &e.pool, e.w.look, []any{name}, &l.owner, &l.now, &l.used, &l.firstExp, &l.head, &l.headExp)
	err = done(err)
	if l.firstExp.Valid {
		l.remaining = time.Duration(l.firstExp.Int64-l.now) * time.Millisecond
	}
	if l.headExp.Valid {
		l.qleft = time.Duration(l.headExp.Int64-l.now) * time.Millisecond
	}
	return l, err
}

// wwait is Wait for a weighted waiter: it returns when the waiter is
// first in the queue and fits, or when the lock's state needs its
// attempt to tell (another kind, a queue row that died). It is woken by
// a change in this process (Local), the Feed (a release, a grant or a
// cancellation in another process: on PostgreSQL a NOTIFY naming the
// first waiter), the expiry of the first holder (for the first waiter)
// or of the first waiter (for the others), and its heartbeat.
func (w *waiter) wwait(ctx context.Context) error {
	if err := w.start(ctx); err != nil {
		return err
	}
	for {
		local, remote := w.channels(true)
		if err := w.keepAlive(ctx); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		l, err := w.e.wlook(ctx, w.req.Name)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil // let the attempt report it
		}
		mine := l.owner == mark(w.req.Kind, w.req.Limit)
		first := !l.head.Valid || l.head.Int64 == w.seq
		if !mine || first && l.used+int64(w.req.Weight) <= int64(w.req.Limit) {
			return nil
		}
		bound := l.qleft + time.Millisecond // the first waiter may have died
		if first {
			bound = l.remaining + time.Millisecond // a holder's expiry frees room
		}
		sent, _ := w.e.beats.of(w)
		bound = min(bound, time.Until(sent.Add(w.e.wttl/3)))
		if w.sub == nil {
			// Nothing announces a release: look again by the fair
			// schedule, soon while the holders and the queue move.
			bound = min(bound, fairDelay(w.still(lockState{token: uint64(l.used), head: l.head.Int64})))
		}
		if try, err := w.sleep(ctx, max(bound, 0), local, remote); try {
			return err
		}
	}
}

// wcancel withdraws a weighted waiter: its queue row goes, and the next
// waiter, which may now fit, is woken.
func (w *waiter) wcancel(ctx context.Context) error {
	w.end()
	err := w.e.writeName(ctx, w.req.Name, func(ctx context.Context) error {
		return w.e.tx(ctx, func(c *sql.Conn) error {
			if err := w.e.begin(ctx, c); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, w.e.q.dequeue, w.seq); err != nil {
				return err
			}
			if w.e.w.wake == "" {
				return nil
			}
			_, err := c.ExecContext(ctx, w.e.w.wake, w.req.Name)
			return err
		})
	})
	w.e.local.signal(w.req.Name)
	return w.e.wrap(err)
}

// wrenew renews a weighted hold: the lease row's expiry (the latest of
// its holders') and the holder's, in one transaction.
func (e *Engine) wrenew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	ms := ttlMillis(ttl)
	done := false
	err := e.writeName(ctx, h.Name, func(ctx context.Context) error {
		done = false
		return e.tx(ctx, func(c *sql.Conn) error {
			if err := e.begin(ctx, c); err != nil {
				return err
			}
			res, err := c.ExecContext(ctx, e.w.renewLease, ms, h.Name, int64(h.Token))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			if res, err = c.ExecContext(ctx, e.w.renewHold, ms, h.Name, h.Owner, int64(h.Token)); err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err == nil && n == 0 {
				return errRefused // roll the lease row back
			}
			done = err == nil
			return err
		})
	})
	if err != nil && !errors.Is(err, errRefused) {
		return e.wrap(err)
	}
	if !done {
		return e.wlost(ctx, h)
	}
	return nil
}

// wrelease gives up one hold of a weighted h: the holder's count goes
// down, its row at zero; the lease row keeps the latest expiry of the
// holders left, or the mark alone while waiters queue, or goes with the
// last holder and waiter (its token kept by the fence). The first waiter
// is woken: it may fit now.
func (e *Engine) wrelease(ctx context.Context, h dlock.Hold) error {
	done := false
	err := e.writeName(ctx, h.Name, func(ctx context.Context) error {
		done = false
		return e.tx(ctx, func(c *sql.Conn) error {
			if err := e.begin(ctx, c); err != nil {
				return err
			}
			if e.d.ConcurrentWrites {
				if _, err := c.ExecContext(ctx, e.w.lockBucket, h.Name); err != nil {
					return err
				}
			}
			var r rawRow
			var now int64
			ok, err := queryOne(ctx, c, e.w.lease, []any{h.Name}, &r.owner, &r.token, &r.holds, &r.expires, &now)
			if err != nil || !ok || !isMark(r.owner) {
				return err
			}
			token, _ := asInt(r.token)
			args := []any{h.Name, h.Owner, int64(h.Token)}
			res, err := c.ExecContext(ctx, e.w.decr, args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n > 0 {
				done = n > 0
				return err
			}
			if res, err = c.ExecContext(ctx, e.w.drop, args...); err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			done = true
			if _, err := c.ExecContext(ctx, e.w.expired, h.Name); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, e.q.sweepName, h.Name); err != nil {
				return err
			}
			var one int64
			waiting, err := queryOne(ctx, c, e.w.waiting, []any{h.Name}, &one)
			if err != nil {
				return err
			}
			var live int64
			if _, err := queryOne(ctx, c, e.w.live, []any{h.Name}, &live); err != nil {
				return err
			}
			if live == 0 && !waiting {
				_, err = c.ExecContext(ctx, e.w.delLease, h.Name)
				return err
			}
			// owner and token unchanged; the expiry recomputed.
			if _, err := c.ExecContext(ctx, e.w.setLease, r.owner, token, h.Name, h.Name); err != nil {
				return err
			}
			if waiting && e.w.wake != "" {
				_, err = c.ExecContext(ctx, e.w.wake, h.Name)
			}
			return err
		})
	})
	if err != nil {
		return e.wrap(err)
	}
	if !done {
		return e.wlost(ctx, h)
	}
	e.maybeSweep(ctx)
	e.local.signal(h.Name)
	return nil
}

// Downgrade lowers the weight of the weighted hold h to weight in place
// (a writer becoming a reader): the token stays, no other request comes in
// between, and the first waiter, which may fit now, is woken. See
// [dlock.Downgrader].
func (e *Engine) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	if h.Kind == dlock.KindMutex || weight < 1 {
		return errorf(dlock.ErrInvalidOption, "cannot downgrade a %s hold to weight %d", h.Kind, weight)
	}
	done := false
	err := e.writeName(ctx, h.Name, func(ctx context.Context) error {
		done = false
		return e.tx(ctx, func(c *sql.Conn) error {
			if err := e.begin(ctx, c); err != nil {
				return err
			}
			res, err := c.ExecContext(ctx, e.w.downgrade, weight, h.Name, h.Owner, int64(h.Token), weight)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			done = true
			if e.w.wake != "" {
				_, err = c.ExecContext(ctx, e.w.wake, h.Name)
			}
			return err
		})
	})
	if err != nil {
		return e.wrap(err)
	}
	if !done {
		err := e.wlost(ctx, h)
		var held int
		if e.holderWeight(ctx, h, &held) == nil && held > 0 && held < weight {
			return fmt.Errorf("holds %d, asks %d: %w", held, weight, dlock.ErrUpgrade)
		}
		return err
	}
	e.local.signal(h.Name)
	return nil
}

// holderWeight reads the weight of h's live holder row into w (0 if none).
func (e *Engine) holderWeight(ctx context.Context, h dlock.Hold, w *int) error {
	q := Bind(e.d, e.table)(`SELECT weight FROM ` + HoldersTable(e.table) + ` WHERE name = ? AND owner = ? AND token = ? AND expires_at > {NOW}`)
	_, err := queryOne(ctx, &e.pool, q, []any{h.Name, h.Owner, int64(h.Token)}, w)
	return err
}

// wlost is the error of a weighted hold that is no longer held.
func (e *Engine) wlost(ctx context.Context, h dlock.Hold) error {
	var w int
	if err := e.holderWeight(ctx, h, &w); err != nil {
		return errorf(dlock.ErrLeaseLost, "token %d (and reading its holder row failed: %v)", h.Token, err)
	}
	return errorf(dlock.ErrLeaseLost, "token %d of owner %s: expired or released (no live row in %s)", h.Token, show(h.Owner), HoldersTable(e.table))
}

// winspect replaces the LockInfo of each weighted name in out (its lease
// row, whose owner is a mark) with one per live holder.
func (e *Engine) winspect(ctx context.Context, out []dlock.LockInfo) ([]dlock.LockInfo, error) {
	var res []dlock.LockInfo
	q := Bind(e.d, e.table)(`SELECT owner, weight, holds, token, expires_at - {NOW}, value FROM ` + HoldersTable(e.table) +
		` WHERE name = ? AND expires_at > {NOW} ORDER BY token`)
	for _, in := range out {
		if !isMark(in.Owner) {
			res = append(res, in)
			continue
		}
		kind, limit, ok := parseMark(in.Owner)
		if !ok {
			in.Bad = "owner " + show(in.Owner) + " starts as dlock's mark of a weighted name but is not one"
			res = append(res, in)
			continue
		}
		rows, err := e.pool.QueryContext(ctx, q, in.Name)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			h := in
			var left int64
			if err := rows.Scan(&h.Owner, &h.Weight, &h.Count, &h.Token, &left, &h.Value); err != nil {
				rows.Close()
				return nil, err
			}
			h.Kind, h.Limit, h.TTL = kind, limit, time.Duration(left)*time.Millisecond
			res = append(res, h)
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return nil, err
		}
		rows.Close()
	}
	return res, nil
}

// sweepHolders deletes up to SweepBatch expired holder rows, if there are
// any: it reads first, so that the mutexes' sweep costs no write (on
// SQLite, the database's write lock) where no weighted hold expired.
func (e *Engine) sweepHolders(ctx context.Context) error {
	if e.d.Weighted == nil {
		return nil
	}
	var one int64
	found, err := queryOne(ctx, &e.pool, e.w.expiredAny, nil, &one)
	switch {
	case err != nil && e.classify(err) == Other && e.checkQueries(ctx, holdersCheck(e.table)) != nil:
		return nil // no holders table (see Check): nothing to sweep
	case err != nil || !found:
		return err
	}
	_, err = e.pool.ExecContext(ctx, e.w.sweep)
	return err
}
