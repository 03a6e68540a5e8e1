package sqllock

import (
	"strconv"
	"strings"
)

// statements are the engine's SQL texts for one dialect and table, with
// the dialect's placeholders. The comment of each says its arguments.
type statements struct {
	// upsert (Returning): name, owner, ttl, name, name, seq (the new
	// row's: its token is its bucket's mark + 1, and no live fair waiter
	// may be queued before seq), then set's and cond's. Returns token,
	// holds when granted, no row when refused.
	upsert string
	// ensure (no Returning): name, name, name, seq. Inserts a free row if
	// there is none, with its bucket's mark as its token, unless a live
	// fair waiter is queued before seq (then update would refuse, and the
	// row would stay behind).
	ensure string
	// update (no Returning): set's, name, then cond's. One row when granted.
	update string
	// granted (no Returning): name. Returns token, holds.
	granted string
	// grantDequeue (WritableCTE): upsert's, then seq. The upsert, and
	// the deletion of the queue row seq if it granted; returns as upsert.
	grantDequeue string

	// release: name, owner, token. With Returning it returns holds.
	release string
	// renew: ttl, name, owner, token.
	renew string
	// releaseDelete (Dialect.DeleteFreed): name, owner, token. Deletes
	// the row of a last hold that is still valid, if no waiter row has its
	// name.
	releaseDelete string
	// sweep: none. Deletes up to SweepBatch lease rows of dlock's that
	// are free or expired and have no waiter rows.
	sweep string
	// lockBucket (FenceTx): name. Locks the name's fence row.
	lockBucket string
	// lockFence (FenceTx): none. Locks every fence row.
	lockFence string
	// sweepWaiters: none. Deletes up to SweepBatch expired waiter rows of
	// dlock's.
	sweepWaiters string

	// state: name. Returns owner, token, holds, expires_at (as stored:
	// see [RowOK]; '' and 0 without a row), now, the sequence of the
	// first live fair waiter and the expiry of the first of them to
	// expire (NULL if none), the number of the name's waiter rows that
	// are not dlock's, and 1 if the lease row exists (else 0). It does not
	// depend on the asker, so that one read serves all of a process's
	// waiters.
	state string

	// enqueue: name, owner, waiter ttl. With Returning it returns seq.
	enqueue string
	// sweepName: name. Deletes the expired waiters of a name.
	sweepName string
	// sweepEnqueue (WritableCTE and Returning): name, then enqueue's.
	// sweepName and enqueue in one statement; returns seq.
	sweepEnqueue string
	// beat: waiter ttl, seq. Refreshes a live waiter row.
	beat string
	// dequeue: seq.
	dequeue string

	// inspect: prefix, prefix. Held locks and rows that are not dlock's
	// (see [RowOK]) with name >= prefix in name order — also names with
	// foreign waiter rows and no lease row — : name, owner, token, holds,
	// expires_at (as stored), now, live waiters, waiter rows that are not
	// dlock's.
	inspect string
}

// Bind returns the function that writes a statement of the engine for
// dialect d and lease table table: the table names, the clock and the
// placeholders.
func Bind(d Dialect, table string) func(string) string {
	r := strings.NewReplacer("{L}", table, "{W}", WaitersTable(table), "{F}", FenceTable(table), "{NOW}", d.Now, "{MAX}", d.Max,
		"{OK}", RowOK(d, "l"), "{WOK}", waiterOK(d))
	return func(q string) string {
		q = r.Replace(q)
		if d.Rebind != nil {
			q = d.Rebind(q)
		}
		return q
	}
}

// SetSQL takes over (token + 1, holds 1) or re-enters (same token,
// holds + 1, the later expiry). Args: owner, owner, owner, ttl, ttl,
// owner ([SetArgs]). The assignments read only columns assigned after
// them, so that MySQL, which assigns left to right, means the same.
const SetSQL = `holds = CASE WHEN l.owner = ? AND l.expires_at > {NOW} THEN l.holds + 1 ELSE 1 END,
	token = CASE WHEN l.owner = ? AND l.expires_at > {NOW} THEN l.token ELSE l.token + 1 END,
	expires_at = CASE WHEN l.owner = ? AND l.expires_at > {NOW} THEN {MAX}(l.expires_at, {NOW} + ?) ELSE {NOW} + ? END,
	owner = ?`

// CondSQL lets the owner re-enter, and anybody take a free or expired row
// when no live fair waiter is queued before seq, if the row is dlock's
// ({OK}: see [RowOK]). Args: owner, name, seq ([CondArgs]).
const CondSQL = `{OK} AND ((l.owner = ? AND l.expires_at > {NOW})
	OR ((l.owner = '' OR l.expires_at <= {NOW})
		AND NOT EXISTS (SELECT 1 FROM {W} w WHERE w.name = ? AND w.seq < ? AND w.expires_at > {NOW})))`

func newStatements(d Dialect, table string) statements {
	var s statements
	rebind := Bind(d, table)
	s.grantStatements(d, rebind)
	s.holdStatements(d, rebind)
	s.queueStatements(d, rebind)
	s.sweepStatements(d, rebind)
	s.inspect = rebind(inspectSQL)
	return s
}

// grantStatements are those of an attempt: the upsert (or ensure and
// update) and the read of the grant.
func (s *statements) grantStatements(d Dialect, rebind func(string) string) {
	upsert := `INSERT INTO {L} AS l (name, owner, holds, token, expires_at)
` + NewRowSQL(d) + `
ON CONFLICT (name) DO UPDATE SET
	` + SetSQL + `
WHERE ` + CondSQL + `
RETURNING token, holds`
	s.upsert = rebind(upsert)
	if d.WritableCTE {
		s.grantDequeue = rebind(`WITH g AS (` + upsert + `),
	d AS (DELETE FROM {W} WHERE seq = ? AND EXISTS (SELECT 1 FROM g))
SELECT token, holds FROM g`)
	}
	s.ensure = rebind(d.InsertIgnore + ` {L} (name, owner, holds, token, expires_at)
SELECT ?, '', 0, f.mark, 0 FROM {F} f WHERE f.bucket = ` + d.Bucket("?") + `
	AND NOT EXISTS (SELECT 1 FROM {W} w WHERE w.name = ? AND w.seq < ? AND w.expires_at > {NOW})`)
	s.update = rebind(`UPDATE {L} AS l SET
	` + SetSQL + `
WHERE l.name = ? AND (` + CondSQL + `)`)
	s.granted = rebind(`SELECT l.token, l.holds FROM {L} AS l WHERE l.name = ?`)
}

// holdStatements are those of a holder: release and renew.
func (s *statements) holdStatements(d Dialect, rebind func(string) string) {
	// owner is assigned before holds for MySQL's sake (see set).
	release := `UPDATE {L} AS l SET
	owner = CASE WHEN l.holds <= 1 THEN '' ELSE l.owner END,
	holds = l.holds - 1
WHERE l.name = ? AND l.owner = ? AND l.token = ? AND l.holds > 0 AND l.expires_at > {NOW}` + FenceFirstSQL(d)
	if d.Returning {
		release += `
RETURNING holds`
	}
	s.release = rebind(release)
	s.renew = rebind(`UPDATE {L} AS l SET expires_at = {NOW} + ?
WHERE l.name = ? AND l.owner = ? AND l.token = ? AND l.holds > 0 AND l.expires_at > {NOW}`)
}

// queueStatements are those of a waiter: the state of a lock, and the fair
// queue's rows.
func (s *statements) queueStatements(d Dialect, rebind func(string) string) {
	// One row whether or not the lease row exists: waiter rows (fair
	// waiters, foreign rows) may outlive a reclaimed lease row.
	s.state = rebind(`SELECT COALESCE(l.owner, ''), COALESCE(l.token, 0), COALESCE(l.holds, 0), COALESCE(l.expires_at, 0), {NOW},
	(SELECT MIN(w.seq) FROM {W} w WHERE w.name = k.name AND w.expires_at > {NOW} AND {WOK}),
	(SELECT MIN(w.expires_at) FROM {W} w WHERE w.name = k.name AND w.expires_at > {NOW} AND {WOK}),
	(SELECT COUNT(*) FROM {W} w WHERE w.name = k.name AND NOT {WOK}),
	CASE WHEN l.name IS NULL THEN 0 ELSE 1 END
FROM (SELECT ? AS name) k LEFT JOIN {L} l ON l.name = k.name`)

	enqueue := `INSERT INTO {W} (name, owner, expires_at) VALUES (?, ?, {NOW} + ?)`
	if d.Returning {
		enqueue += ` RETURNING seq`
	}
	s.enqueue = rebind(enqueue)
	if d.WritableCTE && d.Returning {
		// The deletion and the insertion touch different rows: one
		// statement does both, one round trip fewer per queued waiter.
		s.sweepEnqueue = rebind(`WITH s AS (DELETE FROM {W} WHERE name = ? AND expires_at <= {NOW})
` + enqueue)
	}
	s.beat = rebind(`UPDATE {W} SET expires_at = {NOW} + ? WHERE seq = ? AND expires_at > {NOW}`)
	s.dequeue = rebind(`DELETE FROM {W} WHERE seq = ?`)
}

// sweepStatements are those of reclamation: deleting free lease rows and
// expired waiter rows, under the fence.
func (s *statements) sweepStatements(d Dialect, rebind func(string) string) {
	s.sweepName = rebind(`DELETE FROM {W} WHERE name = ? AND expires_at <= {NOW}`)
	s.releaseDelete = rebind(`DELETE FROM {L} WHERE name = ? AND owner = ? AND token = ? AND holds = 1 AND expires_at > {NOW}
	AND NOT EXISTS (SELECT 1 FROM {W} w WHERE w.name = {L}.name)`)
	s.lockBucket = rebind(LockBucketSQL(d))
	s.lockFence = rebind(`SELECT bucket FROM {F} ORDER BY bucket FOR UPDATE`)
	free := func(l string) string {
		return RowOK(d, l) + ` AND (` + l + `.owner = '' OR ` + l + `.expires_at <= {NOW})
	AND NOT EXISTS (SELECT 1 FROM {W} w WHERE w.name = ` + l + `.name)`
	}
	if d.DeleteLimit {
		s.sweep = rebind(`DELETE FROM {L} WHERE ` + free("{L}") + ` LIMIT ` + strconv.Itoa(SweepBatch))
		s.sweepWaiters = rebind(`DELETE FROM {W} WHERE expires_at <= {NOW} AND owner <> '' AND expires_at >= 0 LIMIT ` + strconv.Itoa(SweepBatch))
	} else {
		s.sweep = rebind(`DELETE FROM {L} AS l WHERE l.name IN (SELECT s.name FROM (SELECT l.name FROM {L} l WHERE ` + free("l") +
			` LIMIT ` + strconv.Itoa(SweepBatch) + `) s)
	AND ` + free("l"))
		if d.FenceFirst {
			s.sweep = rebind(fencedSweepSQL(d, free))
		}
		s.sweepWaiters = rebind(`DELETE FROM {W} WHERE seq IN (SELECT s.seq FROM (SELECT w.seq FROM {W} w WHERE w.expires_at <= {NOW} AND {WOK} LIMIT ` +
			strconv.Itoa(SweepBatch) + `) s)`)
	}
}

// inspectSQL lists held locks and rows that are not dlock's; see
// statements.inspect.
const inspectSQL = `SELECT l.name, l.owner, l.token, l.holds, l.expires_at, {NOW},
	(SELECT COUNT(*) FROM {W} w WHERE w.name = l.name AND w.expires_at > {NOW} AND {WOK}),
	(SELECT COUNT(*) FROM {W} w WHERE w.name = l.name AND NOT {WOK})
FROM {L} AS l
WHERE l.name >= ? AND (NOT {OK} OR l.owner <> '' AND l.holds > 0 AND l.expires_at > {NOW}
	OR EXISTS (SELECT 1 FROM {W} w WHERE w.name = l.name AND NOT {WOK}))
UNION ALL
SELECT o.name, '', 0, 0, 0, {NOW},
	(SELECT COUNT(*) FROM {W} w WHERE w.name = o.name AND w.expires_at > {NOW} AND {WOK}),
	(SELECT COUNT(*) FROM {W} w WHERE w.name = o.name AND NOT {WOK})
FROM (SELECT DISTINCT w.name FROM {W} w WHERE w.name >= ? AND NOT {WOK}) o
WHERE NOT EXISTS (SELECT 1 FROM {L} l WHERE l.name = o.name)
ORDER BY 1`

// NewRowSQL is the SELECT that gives a new lease row (alias l) to an
// INSERT: token its bucket's mark + 1, holds 1, and no row at all when a
// live fair waiter is queued before seq, so that a name whose row was
// reclaimed while fair waiters queue for it is not taken past them. Args:
// name, owner, ttl, name, name, seq ([NewRowArgs]).
func NewRowSQL(d Dialect) string {
	q := `SELECT ?, ?, 1, f.mark + 1, {NOW} + ? FROM {F} f
WHERE f.bucket = ` + d.Bucket("?") + `
	AND NOT EXISTS (SELECT 1 FROM {W} w WHERE w.name = ? AND w.seq < ? AND w.expires_at > {NOW})`
	if d.MarkLock != "" {
		q += "\n" + d.MarkLock
	}
	return q
}

// NewRowArgs are the arguments of NewRowSQL.
func NewRowArgs(name, owner string, ttl, seq int64) []any {
	return []any{name, owner, ttl, name, name, seq}
}

// FenceFirstSQL is the condition (with a leading AND) that locks the
// fence bucket of the lease row l before l is deleted, under
// Dialect.FenceFirst; "" otherwise.
func FenceFirstSQL(d Dialect) string {
	if !d.FenceFirst {
		return ""
	}
	return `
	AND EXISTS (SELECT 1 FROM {F} ff WHERE ff.bucket = ` + d.Bucket("l.name") + ` FOR UPDATE)`
}

// fencedSweepSQL is the sweep under Dialect.FenceFirst: it locks the
// fence rows of its batch's names in bucket order before it deletes a
// row, so that two sweeps, which lock several buckets each, never wait
// for each other in a cycle (locked row by row as the deletion scans its
// batch, they would: the orders of two scans differ). free(l) is the
// condition that the lease row l may be deleted.
func fencedSweepSQL(d Dialect, free func(l string) string) string {
	return `WITH c AS MATERIALIZED (SELECT l.name FROM {L} l WHERE ` + free("l") + ` LIMIT ` + strconv.Itoa(SweepBatch) + `),
	f AS MATERIALIZED (SELECT ff.bucket FROM {F} ff WHERE ff.bucket IN (SELECT ` + d.Bucket("c.name") + ` FROM c)
		ORDER BY ff.bucket FOR UPDATE)
DELETE FROM {L} AS l WHERE l.name IN (SELECT c.name FROM c) AND ` + free("l") + `
	AND ` + d.Bucket("l.name") + ` IN (SELECT f.bucket FROM f)`
}

// LockBucketSQL locks the fence row of a name (FOR UPDATE). Args: name.
func LockBucketSQL(d Dialect) string {
	return `SELECT mark FROM {F} WHERE bucket = ` + d.Bucket("?") + ` FOR UPDATE`
}

// SweepBatch is the most lease rows (and waiter rows) one sweep deletes.
const SweepBatch = 256

// SetArgs and CondArgs are the arguments of SetSQL and CondSQL.
func SetArgs(owner string, ttl int64) []any {
	return []any{owner, owner, owner, ttl, ttl, owner}
}

func CondArgs(owner, name string, seq int64) []any {
	return []any{owner, name, seq}
}
