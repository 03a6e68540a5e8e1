//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"database/sql"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // to plant rows in the sqlite backend's file
)

// TestStatusForeignData plants rows that dlock did not write beside a
// held lock: status lists all three, the foreign ones marked, and says so
// on stderr. Before, one row with a token that is not a number failed
// the whole listing with a Scan error, and rows with holds 0 and an
// owner were not listed.
func TestStatusForeignData(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	_, owner := holdLock(t, u, "good")
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", pu.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO dlock_locks (name, owner, holds, token, expires_at) VALUES
		('bad-token', 'x', 1, 'not-a-number', 9999999999999),
		('bad-holds', 'y', 0, 5, 9999999999999)`); err != nil {
		t.Fatal(err)
	}
	r := runDlock(t, nil, "status", "--url", u)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[0], "FOREIGN DATA") {
		t.Fatalf("want a header with FOREIGN DATA and 3 rows:\n%s", r.stdout)
	}
	for i, want := range []struct{ name, bad string }{
		{"bad-holds", "with holds 0"}, {"bad-token", `token "not-a-number" is not an integer`}, {"good", ""},
	} {
		row := lines[i+1]
		switch {
		case !strings.HasPrefix(row, want.name+" "):
			t.Errorf("row %d = %q, want lock %s", i+1, row, want.name)
		case want.bad == "" && (!strings.Contains(row, owner) || strings.Contains(row, "dlock did")):
			t.Errorf("row %d = %q, want the good lock held by %s, unmarked", i+1, row, owner)
		case !strings.Contains(row, want.bad):
			t.Errorf("row %d = %q, want it marked %q", i+1, row, want.bad)
		}
	}
	if !strings.Contains(r.stderr, "2 of the listed locks") {
		t.Errorf("stderr %q does not say that 2 records are foreign", r.stderr)
	}

	// --json lists the same three, the foreign ones marked.
	r = runDlock(t, nil, "status", "--url", u, "--json")
	var got []jsonInfo
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v; stdout:\n%s", r.code, err, r.stdout)
	}
	marked := map[string]bool{}
	for _, in := range got {
		marked[in.Name] = in.Foreign && in.ForeignData != ""
	}
	if len(got) != 3 || !marked["bad-token"] || !marked["bad-holds"] || marked["good"] {
		t.Errorf("--json = %+v, want bad-token and bad-holds marked foreign, good not", got)
	}
}
