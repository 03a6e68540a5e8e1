package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/postgres"
)

func TestNewRefusesNilClient(t *testing.T) {
	_, errDB := postgres.New(nil)
	_, errPool := postgres.NewPool(nil, postgres.Table("9bad"))
	errMigrate := postgres.Migrate(context.Background(), nil)
	for _, c := range []struct {
		call string
		err  error
		want []string
	}{
		{"New(nil)", errDB, []string{"postgres: nil *sql.DB"}},
		{`NewPool(nil, Table("9bad"))`, errPool, []string{"postgres: nil *pgxpool.Pool", `"9bad"`}},
		{"Migrate(ctx, nil)", errMigrate, []string{"postgres: nil *sql.DB"}},
	} {
		if !errors.Is(c.err, dlock.ErrInvalidOption) {
			t.Errorf("%s: %v, want an error matching ErrInvalidOption", c.call, c.err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.call, c.err, w)
			}
		}
	}
}
