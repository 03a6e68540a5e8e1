package sqlite

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
)

// dialect is SQLite's, with the marks of a new fence table starting at the
// host's clock in microseconds since the Unix epoch: a database file
// deleted (or replaced by a new one) and created again gives tokens above
// every token of the old file, as long as the host's clock did not go
// back between the two creations and the old file gave fewer grants than
// microseconds passed between them (under one grant per µs on average:
// SQLite commits one transaction at a time, tens of thousands per second
// at most). A file restored from a backup is not covered: its marks are
// those of the backup.
var dialect = func() sqllock.Dialect {
	d := sqllock.SQLite
	d.FenceFloor = func() int64 { return time.Now().UnixMicro() }
	return d
}()

// fileID is the identity (device and inode on Unix) of the database file
// that a Backend opened.
type fileID struct {
	path string
	fi   os.FileInfo
}

// check reports an error if path no longer names the file that was
// opened: it was deleted (rm locks.db) or replaced. The connections keep
// using the old file, which no new process sees, so its locks exclude
// nobody any more. An error of Stat other than "does not exist" (a
// directory made unreadable) says nothing about the file and is ignored.
func (f *fileID) check(what error) error {
	if f == nil {
		return nil
	}
	fi, err := os.Stat(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return sqllock.Errorf(what, "sqlite %s: the database file was deleted while in use: the locks in it no longer exclude other processes (clear a stuck lock as the package doc says, never by deleting the file)", f.path)
	case err == nil && !os.SameFile(fi, f.fi):
		return sqllock.Errorf(what, "sqlite %s: the database file was replaced by another while in use: the locks in the old one no longer exclude other processes (clear a stuck lock as the package doc says, never by replacing the file)", f.path)
	}
	return nil
}

// Acquire makes one attempt to grant req; see [dlock.Backend]. If the
// database file was deleted or replaced since the Backend opened it, it
// fails with an error matching [dlock.ErrBackendUnavailable]: open the
// Backend again.
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := b.file.check(dlock.ErrBackendUnavailable); err != nil {
		return dlock.Grant{}, nil, err
	}
	g, w, err := b.shell.Acquire(ctx, req)
	if w != nil && b.file != nil {
		w = fileWaiter{w, b.file}
	}
	return g, w, err
}

// fileWaiter is a waiter whose attempts check the file as Acquire does:
// a wait may outlast the file.
type fileWaiter struct {
	dlock.Waiter
	file *fileID
}

func (w fileWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if err := w.file.check(dlock.ErrBackendUnavailable); err != nil {
		return dlock.Grant{}, err
	}
	return w.Waiter.Acquire(ctx)
}

// Renew extends the hold h to ttl from now by the database's clock. If the
// database file was deleted or replaced since the Backend opened it, the
// hold is lost: the error matches [dlock.ErrLeaseLost].
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if err := b.file.check(dlock.ErrLeaseLost); err != nil {
		return err
	}
	return b.shell.Renew(ctx, h, ttl)
}

// RenewBatch renews many holds in one transaction; see
// [dlock.BatchRenewer] and Renew.
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	if err := b.file.check(dlock.ErrLeaseLost); err != nil {
		errs := make([]error, len(rs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return b.shell.RenewBatch(ctx, rs)
}

// Release gives up one hold of h. If the database file was deleted or
// replaced since the Backend opened it, the hold was already lost: the
// error matches [dlock.ErrLeaseLost] and nothing is changed.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	if err := b.file.check(dlock.ErrLeaseLost); err != nil {
		return err
	}
	return b.shell.Release(ctx, h)
}
