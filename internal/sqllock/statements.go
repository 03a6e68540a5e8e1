package sqllock

import "strings"

// statements are the engine's SQL texts for one dialect and table, with
// the dialect's placeholders. The comment of each says its arguments.
type statements struct {
	// upsert (Returning): name, owner, ttl, then set's and cond's.
	// Returns token, holds when granted, no row when refused.
	upsert string
	// ensure (no Returning): name. Inserts a free row if there is none.
	ensure string
	// update (no Returning): set's, name, then cond's. One row when granted.
	update string
	// granted (no Returning): name. Returns token, holds.
	granted string

	// release: name, owner, token. With Returning it returns holds.
	release string
	// renew: ttl, name, owner, token.
	renew string

	// state: seq, seq, name. Returns owner, token, holds, remaining ms,
	// and of the live fair waiters queued before seq: their number and the
	// remaining ms of the first of them to expire (NULL if none).
	state string

	// enqueue: name, owner, waiter ttl. With Returning it returns seq.
	enqueue string
	// sweep: name. Deletes the expired waiters of a name.
	sweep string
	// beat: waiter ttl, seq. Refreshes a live waiter row.
	beat string
	// dequeue: seq.
	dequeue string

	// inspect: prefix. Held locks with name >= prefix in name order:
	// name, owner, token, holds, remaining ms, live waiters.
	inspect string
}

// Bind returns the function that writes a statement of the engine for
// dialect d and lease table table: the table names, the clock and the
// placeholders.
func Bind(d Dialect, table string) func(string) string {
	r := strings.NewReplacer("{L}", table, "{W}", WaitersTable(table), "{NOW}", d.Now, "{MAX}", d.Max)
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
// when no live fair waiter is queued before seq. Args: owner, name, seq
// ([CondArgs]).
const CondSQL = `(l.owner = ? AND l.expires_at > {NOW})
	OR ((l.owner = '' OR l.expires_at <= {NOW})
		AND NOT EXISTS (SELECT 1 FROM {W} w WHERE w.name = ? AND w.seq < ? AND w.expires_at > {NOW}))`

func newStatements(d Dialect, table string) statements {
	rebind := Bind(d, table)
	const set, cond = SetSQL, CondSQL

	var s statements
	s.upsert = rebind(`INSERT INTO {L} AS l (name, owner, holds, token, expires_at)
VALUES (?, ?, 1, 1, {NOW} + ?)
ON CONFLICT (name) DO UPDATE SET
	` + set + `
WHERE ` + cond + `
RETURNING token, holds`)
	s.ensure = rebind(d.InsertIgnore + ` {L} (name, owner, holds, token, expires_at) VALUES (?, '', 0, 0, 0)`)
	s.update = rebind(`UPDATE {L} AS l SET
	` + set + `
WHERE l.name = ? AND (` + cond + `)`)
	s.granted = rebind(`SELECT l.token, l.holds FROM {L} AS l WHERE l.name = ?`)

	// owner is assigned before holds for MySQL's sake (see set).
	release := `UPDATE {L} AS l SET
	owner = CASE WHEN l.holds <= 1 THEN '' ELSE l.owner END,
	holds = l.holds - 1
WHERE l.name = ? AND l.owner = ? AND l.token = ? AND l.holds > 0 AND l.expires_at > {NOW}`
	if d.Returning {
		release += `
RETURNING holds`
	}
	s.release = rebind(release)
	s.renew = rebind(`UPDATE {L} AS l SET expires_at = {NOW} + ?
WHERE l.name = ? AND l.owner = ? AND l.token = ? AND l.holds > 0 AND l.expires_at > {NOW}`)

	s.state = rebind(`SELECT l.owner, l.token, l.holds, l.expires_at - {NOW},
	(SELECT COUNT(*) FROM {W} w WHERE w.name = l.name AND w.seq < ? AND w.expires_at > {NOW}),
	(SELECT MIN(w.expires_at) - {NOW} FROM {W} w WHERE w.name = l.name AND w.seq < ? AND w.expires_at > {NOW})
FROM {L} AS l WHERE l.name = ?`)

	enqueue := `INSERT INTO {W} (name, owner, expires_at) VALUES (?, ?, {NOW} + ?)`
	if d.Returning {
		enqueue += ` RETURNING seq`
	}
	s.enqueue = rebind(enqueue)
	s.sweep = rebind(`DELETE FROM {W} WHERE name = ? AND expires_at <= {NOW}`)
	s.beat = rebind(`UPDATE {W} SET expires_at = {NOW} + ? WHERE seq = ? AND expires_at > {NOW}`)
	s.dequeue = rebind(`DELETE FROM {W} WHERE seq = ?`)

	s.inspect = rebind(`SELECT l.name, l.owner, l.token, l.holds, l.expires_at - {NOW},
	(SELECT COUNT(*) FROM {W} w WHERE w.name = l.name AND w.expires_at > {NOW})
FROM {L} AS l
WHERE l.name >= ? AND l.owner <> '' AND l.holds > 0 AND l.expires_at > {NOW}
ORDER BY l.name`)
	return s
}

// SetArgs and CondArgs are the arguments of SetSQL and CondSQL.
func SetArgs(owner string, ttl int64) []any {
	return []any{owner, owner, owner, ttl, ttl, owner}
}

func CondArgs(owner, name string, seq int64) []any {
	return []any{owner, name, seq}
}
