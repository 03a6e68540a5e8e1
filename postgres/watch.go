package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/jackc/pgx/v5"
)

// Watching a name (dlock.Watcher) by LISTEN/NOTIFY. A watch registers a
// row (name, pid of the listening connection) in the watchers table; the
// triggers of watchSchema notify the lease table's channel with
// watchPrefix + the name at each change of a watched name, and the
// listening connection hands those notifications to the watches of the
// name in this process (and never to the lock waiters, whom they do not
// concern). Nothing is sent for a name nobody watches: the triggers'
// read of the (usually empty) watchers table is what a grant pays.
//
// A watch is tied to one listening connection: when it is lost
// (pg_terminate_backend, a restart), notifications sent meanwhile are
// lost, so the watch's Wait fails and the Client subscribes again (a new
// row for the new connection) and reads the holders again.

// watchPrefix starts the payload of a watch notification: a lock
// waiter's payload is a decimal sequence or empty.
const watchPrefix = "w:"

// watchersTable returns the name of the watchers table of lease table
// locks: a row (name, pid) per watched name and listening connection.
func watchersTable(locks string) string { return locks + "_watchers" }

// watchHub is the process's side of the watches on one listenFeed.
type watchHub struct {
	mu    sync.Mutex
	pid   uint32 // the listening connection's backend pid; 0 while none
	epoch uint64 // listening connections so far: a watch's is its own
	lost  notify.Broadcast
	names map[string]*watchedName
}

// watchedName is the watches of one name in this process.
type watchedName struct {
	n   int // subscriptions
	pid uint32
	bc  notify.Broadcast
}

// listening records that the connection pid now listens (registered):
// watches made on an earlier connection are broken.
func (h *watchHub) listening(pid uint32) {
	h.mu.Lock()
	h.pid = pid
	h.epoch++
	h.mu.Unlock()
	h.lost.Broadcast()
}

// stopped records that the listening connection is gone.
func (h *watchHub) stopped() {
	h.mu.Lock()
	h.pid = 0
	h.epoch++
	h.mu.Unlock()
	h.lost.Broadcast()
}

// listenerGone deletes the watchers rows of listening connections that
// are gone (their listeners row was deleted by register), and those of
// pid: best effort, as such rows cost only notifications. A table made
// by an earlier version has no watchers table: nothing to do.
func listenerGone(ctx context.Context, conn *pgx.Conn, locks string, pid uint32) {
	conn.Exec(ctx, `DELETE FROM `+watchersTable(locks)+` w WHERE w.pid = $1
	OR NOT EXISTS (SELECT 1 FROM `+listenersTable(locks)+` l WHERE l.pid = w.pid)`, int64(pid))
}

// notice wakes the watches of name.
func (h *watchHub) notice(name string) {
	h.mu.Lock()
	w := h.names[name]
	h.mu.Unlock()
	if w != nil {
		w.bc.Broadcast()
	}
}

// pgWatch is a Backend's WatchFunc.
type pgWatch struct {
	db    *sql.DB
	table string
	feed  *sqllock.WatchFeed
	hub   *watchHub
	reg   sync.Mutex // a name's row is written and deleted one at a time
}

// watch subscribes to the changes of name: it starts the listening
// connection (a subscription to the feed), then registers the watchers
// row under the listeners' lock, exclusive, so that every change that
// commits after it notifies.
func (p *pgWatch) watch(ctx context.Context, name string) (dlock.Subscription, error) {
	fs, err := p.feed.Subscribe(ctx)
	if err != nil {
		return nil, err
	}
	p.reg.Lock()
	defer p.reg.Unlock()
	h := p.hub
	h.mu.Lock()
	pid, epoch := h.pid, h.epoch
	if pid == 0 {
		h.mu.Unlock()
		fs.Close()
		return nil, sqllock.Errorf(dlock.ErrBackendUnavailable, "no connection listens on the channel of %s", p.table)
	}
	if h.names == nil {
		h.names = map[string]*watchedName{}
	}
	w := h.names[name]
	if w == nil {
		w = &watchedName{}
		h.names[name] = w
	}
	w.n++
	s := &pgSub{p: p, fs: fs, w: w, name: name, epoch: epoch, changed: w.bc.Wait(), lost: h.lost.Wait()}
	register := w.pid != pid
	h.mu.Unlock()
	if register {
		if err := p.register(ctx, name, pid); err != nil {
			s.close(false)
			return nil, err
		}
		h.mu.Lock()
		w.pid = pid
		h.mu.Unlock()
	}
	return s, nil
}

// register writes the watchers row of name for the listening connection
// pid.
func (p *pgWatch) register(ctx context.Context, name string, pid uint32) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(`+listenKey(channel(p.table))+`)`); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO `+watchersTable(p.table)+` (name, pid) VALUES ($1, $2) ON CONFLICT DO NOTHING`, name, int64(pid))
	if pgCode(err) == "42P01" { // undefined_table
		return fmt.Errorf("the watchers table %s is missing: create it with `dlock migrate` or Migrate (%w)", watchersTable(p.table), err)
	}
	if err != nil {
		return err
	}
	return tx.Commit()
}

// pgSub is a watch of one name.
type pgSub struct {
	p       *pgWatch
	fs      sqllock.Subscription
	w       *watchedName
	name    string
	epoch   uint64
	changed <-chan struct{}
	lost    <-chan struct{}
	once    sync.Once
}

// errListenLost is the error of a watch whose listening connection was
// lost: notifications may have been missed.
var errListenLost = errors.New("the listening connection was lost (notifications may have been missed)")

// Wait implements [dlock.Subscription].
func (s *pgSub) Wait(ctx context.Context) error {
	for {
		if err := s.broken(); err != nil {
			return err
		}
		select {
		case <-s.changed:
			s.p.hub.mu.Lock()
			s.changed = s.w.bc.Wait()
			s.p.hub.mu.Unlock()
			return s.broken()
		case <-s.lost:
			s.p.hub.mu.Lock()
			s.lost = s.p.hub.lost.Wait()
			s.p.hub.mu.Unlock()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// broken reports errListenLost if the listening connection that the
// watch registered for is gone.
func (s *pgSub) broken() error {
	s.p.hub.mu.Lock()
	defer s.p.hub.mu.Unlock()
	if s.p.hub.epoch != s.epoch {
		return sqllock.Errorf(dlock.ErrBackendUnavailable, "watch of %q: %w", s.name, errListenLost)
	}
	return nil
}

// Close implements [dlock.Subscription]: the last watch of the name in
// this process deletes its watchers row (best effort: a row left behind
// costs only notifications, and goes with its connection's listeners row).
func (s *pgSub) Close() error {
	s.close(true)
	return nil
}

// close is Close; lock says to take the registration lock (which a
// failed watch holds already).
func (s *pgSub) close(lock bool) {
	s.once.Do(func() {
		if lock {
			s.p.reg.Lock()
			defer s.p.reg.Unlock()
		}
		h := s.p.hub
		h.mu.Lock()
		s.w.n--
		pid := uint32(0)
		if s.w.n == 0 {
			delete(h.names, s.name)
			pid = s.w.pid
		}
		h.mu.Unlock()
		if pid != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s.p.db.ExecContext(ctx, `DELETE FROM `+watchersTable(s.p.table)+` WHERE name = $1 AND pid = $2`, s.name, int64(pid))
		}
		s.fs.Close()
	})
}
