package sqllock

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// Foreign data. A lease row that dlock did not write — a token or count
// that is not an integer (SQLite keeps any value in any column), a count
// out of range, an owner without holds or holds without an owner, a token
// at the top of its range — is never taken over, re-entered or counted as
// a holder: every statement that grants checks the row with [RowOK], and
// the state read after a refused attempt says what is wrong, which the
// caller gets as an error matching [dlock.ErrForeignData]. Inspect lists
// such rows with LockInfo.Bad set. The same goes for waiter rows of the
// lock's name (see waiterOK).

// MaxHolds is the largest reentry count of a lease row: MySQL packs the
// count of a grant into 20 bits of its last-insert id. A row at it cannot
// be re-entered, and a row above it is foreign data.
const MaxHolds = 1<<20 - 1

// maxToken is the largest token the dialect can store and hand out.
func (d Dialect) maxToken() int64 {
	if d.MaxToken > 0 {
		return d.MaxToken
	}
	return math.MaxInt64
}

// RowOK returns an SQL condition that holds for a lease row dlock can
// read and write, its columns qualified by alias ("l"; "" for none): the
// integer columns are integers (on dialects with IsInteger), the token
// is below the dialect's largest (so that token + 1 is exact), the count
// is in 0..MaxHolds-1 (so that a re-entry fits), and the row is free
// (no owner, no holds) or held (an owner, holds). It has no placeholders.
func RowOK(d Dialect, alias string) string {
	c := func(col string) string {
		if alias == "" {
			return col
		}
		return alias + "." + col
	}
	var b strings.Builder
	b.WriteString("(")
	if d.IsInteger != nil {
		for _, col := range []string{"token", "holds", "expires_at"} {
			b.WriteString(d.IsInteger(c(col)) + " AND ")
		}
	}
	fmt.Fprintf(&b, "%s >= 0 AND %s < %d AND %s >= 0 AND %s < %d AND %s >= 0 AND ((%s = '' AND %s = 0) OR (%s <> '' AND %s > 0)))",
		c("token"), c("token"), d.maxToken(), c("holds"), c("holds"), MaxHolds, c("expires_at"),
		c("owner"), c("holds"), c("owner"), c("holds"))
	return b.String()
}

// waiterOK returns an SQL condition that holds for a waiter row (alias w)
// that dlock wrote: a non-empty owner and a non-negative integer expiry.
func waiterOK(d Dialect) string {
	s := "(w.owner <> '' AND w.expires_at >= 0"
	if d.IsInteger != nil {
		s += " AND " + d.IsInteger("w.expires_at")
	}
	return s + ")"
}

// asInt returns v, a column scanned into an any, as an integer: the
// drivers give int64 for integers (MySQL's text protocol: their digits
// as []byte). Anything else (a REAL, TEXT in SQLite, NULL) is not one.
func asInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case []byte:
		n, err := strconv.ParseInt(string(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// show formats a column's value for a message, cut to a readable length.
func show(v any) string {
	var s string
	switch v := v.(type) {
	case nil:
		s = "NULL"
	case []byte:
		s = strconv.Quote(string(v))
	case string:
		s = strconv.Quote(v)
	default:
		s = fmt.Sprintf("%v (%T)", v, v)
	}
	if len(s) > 64 {
		s = s[:61] + "..."
	}
	return s
}

// rawRow is a lease row as read, before it is checked.
type rawRow struct {
	owner                 string
	token, holds, expires any
	badWaiters            int64 // waiter rows of the name that fail waiterOK
}

// checkRow reads r into s's owner, token, holds and remaining (given the
// database's now, in ms) and returns what makes it foreign data, or "".
func (e *Engine) checkRow(r rawRow, now int64, s *lockState) string {
	s.owner = r.owner
	token, okT := asInt(r.token)
	holds, okH := asInt(r.holds)
	exp, okE := asInt(r.expires)
	if okT && token >= 0 {
		s.token = uint64(token)
	}
	if okH && holds >= 0 && holds <= MaxHolds {
		s.holds = int(holds)
	}
	if okE && exp >= 0 {
		s.remaining = time.Duration(exp-now) * time.Millisecond
	}
	switch {
	case !okT:
		return "token " + show(r.token) + " is not an integer"
	case !okH:
		return "holds " + show(r.holds) + " is not an integer"
	case !okE:
		return "expires_at " + show(r.expires) + " is not an integer"
	case token < 0:
		return fmt.Sprintf("token %d is negative", token)
	case token >= e.d.maxToken():
		return fmt.Sprintf("token %d is at the top of the range (%d on %s): no later token can be given", token, e.d.maxToken(), e.d.Name)
	case holds < 0 || holds >= MaxHolds:
		return fmt.Sprintf("holds %d is out of the range 0..%d", holds, MaxHolds-1)
	case exp < 0:
		return fmt.Sprintf("expires_at %d is negative", exp)
	case r.owner == "" && holds > 0:
		return fmt.Sprintf("holds %d without an owner", holds)
	case r.owner != "" && holds == 0:
		return fmt.Sprintf("owner %s with holds 0", show(r.owner))
	case r.badWaiters > 0:
		return fmt.Sprintf("%d row(s) of %s for it are not dlock's (empty owner, or expires_at not a non-negative integer)", r.badWaiters, WaitersTable(e.table))
	}
	return ""
}

// foreign is the error of an operation on name refused because its row
// holds foreign data.
func (e *Engine) foreign(name, fault string) error {
	return errorf(dlock.ErrForeignData, "row %q of table %s holds data that dlock did not write: %s; nothing was changed", name, e.table, fault)
}
