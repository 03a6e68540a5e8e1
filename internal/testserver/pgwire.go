package testserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// PGError is an ErrorResponse from PostgreSQL.
type PGError struct {
	Severity, Code, Message string
}

// Error formats the severity, message and SQLSTATE.
func (e *PGError) Error() string {
	return fmt.Sprintf("postgres: %s: %s (SQLSTATE %s)", e.Severity, e.Message, e.Code)
}

// pgQuery logs in with trust authentication, runs sql with the simple query
// protocol and returns the rows of the last result as text (NULL as "").
func pgQuery(ctx context.Context, addr, user, db, sql string) ([][]string, error) {
	c, err := dialCtx(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := bufio.NewReader(c)

	var startup []byte
	startup = binary.BigEndian.AppendUint32(startup, 0)
	startup = binary.BigEndian.AppendUint32(startup, 196608) // protocol 3.0
	for _, s := range []string{"user", user, "database", db, "application_name", "dlock-testserver"} {
		startup = append(append(startup, s...), 0)
	}
	startup = append(startup, 0)
	binary.BigEndian.PutUint32(startup, uint32(len(startup)))
	if _, err := c.Write(startup); err != nil {
		return nil, err
	}
	if err := pgUntilReady(r, nil); err != nil {
		return nil, err
	}
	q := []byte{'Q', 0, 0, 0, 0}
	q = append(append(q, sql...), 0)
	binary.BigEndian.PutUint32(q[1:], uint32(len(q)-1))
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	var rows [][]string
	if err := pgUntilReady(r, &rows); err != nil {
		return nil, err
	}
	_, _ = c.Write([]byte{'X', 0, 0, 0, 4})
	return rows, nil
}

// pgUntilReady reads messages up to ReadyForQuery, collecting DataRows into
// rows (if not nil) and returning the first ErrorResponse.
func pgUntilReady(r *bufio.Reader, rows *[][]string) error {
	var firstErr error
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if firstErr != nil {
				return firstErr
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > 64<<20 {
			return errors.New("postgres: bad message length")
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch hdr[0] {
		case 'R':
			if len(body) < 4 || binary.BigEndian.Uint32(body) != 0 {
				return fmt.Errorf("postgres: unsupported authentication request %v (need trust)", body)
			}
		case 'E':
			e := &PGError{}
			for len(body) > 1 {
				code := body[0]
				end := 1
				for end < len(body) && body[end] != 0 {
					end++
				}
				v := string(body[1:end])
				switch code {
				case 'S':
					e.Severity = v
				case 'C':
					e.Code = v
				case 'M':
					e.Message = v
				}
				if end >= len(body) {
					break
				}
				body = body[end+1:]
			}
			if firstErr == nil {
				firstErr = e
			}
		case 'D':
			if rows == nil || len(body) < 2 {
				continue
			}
			ncol := int(binary.BigEndian.Uint16(body))
			body = body[2:]
			row := make([]string, 0, ncol)
			for i := 0; i < ncol && len(body) >= 4; i++ {
				l := int32(binary.BigEndian.Uint32(body))
				body = body[4:]
				if l < 0 {
					row = append(row, "")
					continue
				}
				if int(l) > len(body) {
					return errors.New("postgres: bad DataRow")
				}
				row = append(row, string(body[:l]))
				body = body[l:]
			}
			*rows = append(*rows, row)
		case 'T':
			if rows != nil {
				*rows = nil // rows of the last result only
			}
		case 'Z':
			return firstErr
		}
	}
}

// pgReady is the readiness check: a real login and a query.
func pgReady(ctx context.Context, addr string) error {
	rows, err := pgQuery(ctx, addr, "postgres", "postgres", "SELECT 1")
	return selectedOne("postgres", rows, err)
}
