package testserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MySQLError is an ERR packet from MariaDB.
type MySQLError struct {
	Code    uint16
	State   string
	Message string
}

// Error formats the error number, SQLSTATE and message.
func (e *MySQLError) Error() string {
	return fmt.Sprintf("mysql: Error %d (%s): %s", e.Code, e.State, e.Message)
}

const (
	myClientLongPassword  = 1
	myClientLongFlag      = 4
	myClientConnectWithDB = 8
	myClientProtocol41    = 512
	myClientTransactions  = 8192
	myClientSecureConn    = 32768
	myClientMultiResults  = 1 << 17
	myClientPluginAuth    = 1 << 19
)

type myConn struct {
	r   *bufio.Reader
	w   io.Writer
	seq byte
}

func (c *myConn) read() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	c.seq = hdr[3] + 1
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (c *myConn) write(payload []byte) error {
	hdr := []byte{byte(len(payload)), byte(len(payload) >> 8), byte(len(payload) >> 16), c.seq}
	c.seq++
	_, err := c.w.Write(append(hdr, payload...))
	return err
}

func myErr(b []byte) error {
	e := &MySQLError{}
	if len(b) >= 3 {
		e.Code = binary.LittleEndian.Uint16(b[1:])
		b = b[3:]
		if len(b) >= 6 && b[0] == '#' {
			e.State = string(b[1:6])
			b = b[6:]
		}
		e.Message = string(b)
	}
	return e
}

// lenenc reads a length-encoded integer; null reports the NULL marker 0xfb.
func lenenc(b []byte) (v uint64, n int, null bool, err error) {
	if len(b) == 0 {
		return 0, 0, false, errors.New("mysql: short packet")
	}
	switch b[0] {
	case 0xfb:
		return 0, 1, true, nil
	case 0xfc:
		if len(b) < 3 {
			break
		}
		return uint64(binary.LittleEndian.Uint16(b[1:])), 3, false, nil
	case 0xfd:
		if len(b) < 4 {
			break
		}
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4, false, nil
	case 0xfe:
		if len(b) < 9 {
			break
		}
		return binary.LittleEndian.Uint64(b[1:]), 9, false, nil
	default:
		return uint64(b[0]), 1, false, nil
	}
	return 0, 0, false, errors.New("mysql: short packet")
}

func isEOF(b []byte) bool { return len(b) > 0 && b[0] == 0xfe && len(b) < 9 }

// mysqlQuery logs in as user with an empty password (mysql_native_password),
// optionally into db, runs one statement and returns the rows as text (NULL
// as "").
func mysqlQuery(ctx context.Context, addr, user, db, sql string) ([][]string, error) {
	nc, err := dialCtx(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	c := &myConn{r: bufio.NewReader(nc), w: nc}
	if err := c.login(user, db); err != nil {
		return nil, err
	}
	c.seq = 0
	if err := c.write(append([]byte{0x03}, sql...)); err != nil { // COM_QUERY
		return nil, err
	}
	rows, err := c.result()
	if err != nil {
		return nil, err
	}
	c.seq = 0
	_ = c.write([]byte{0x01}) // COM_QUIT
	return rows, nil
}

// readSome reads a packet that must not be empty; what names it in the error.
func (c *myConn) readSome(what string) ([]byte, error) {
	b, err := c.read()
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("mysql: empty " + what)
	}
	return b, nil
}

// login answers the server's handshake as user with an empty password.
func (c *myConn) login(user, db string) error {
	hs, err := c.read()
	if err != nil {
		return err
	}
	if len(hs) > 0 && hs[0] == 0xff {
		return myErr(hs)
	}
	if len(hs) == 0 || hs[0] != 10 {
		return fmt.Errorf("mysql: unexpected handshake %q", hs)
	}
	caps := uint32(myClientLongPassword | myClientLongFlag | myClientProtocol41 | myClientTransactions |
		myClientSecureConn | myClientMultiResults | myClientPluginAuth)
	if db != "" {
		caps |= myClientConnectWithDB
	}
	var p []byte
	p = binary.LittleEndian.AppendUint32(p, caps)
	p = binary.LittleEndian.AppendUint32(p, 1<<24)
	p = append(p, 33) // utf8_general_ci
	p = append(p, make([]byte, 23)...)
	p = append(append(p, user...), 0)
	p = append(p, 0) // empty auth response
	if db != "" {
		p = append(append(p, db...), 0)
	}
	p = append(append(p, "mysql_native_password"...), 0)
	if err := c.write(p); err != nil {
		return err
	}
	for {
		b, err := c.readSome("auth reply")
		if err != nil {
			return err
		}
		switch b[0] {
		case 0x00:
			return nil
		case 0xff:
			return myErr(b)
		case 0xfe: // auth switch: the empty password is empty in every plugin
			if err := c.write(nil); err != nil {
				return err
			}
		default:
			return fmt.Errorf("mysql: unexpected auth reply %q", b)
		}
	}
}

// result reads the reply to COM_QUERY: nothing for an OK packet, else the
// rows of the text result set.
func (c *myConn) result() ([][]string, error) {
	b, err := c.readSome("reply")
	if err != nil {
		return nil, err
	}
	switch b[0] {
	case 0x00:
		return nil, nil
	case 0xff:
		return nil, myErr(b)
	}
	ncol, _, _, err := lenenc(b)
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < ncol; i++ { // column definitions
		if _, err := c.read(); err != nil {
			return nil, err
		}
	}
	if b, err = c.read(); err != nil || !isEOF(b) {
		return nil, fmt.Errorf("mysql: expected EOF after columns (%v)", err)
	}
	var rows [][]string
	for {
		b, err := c.read()
		if err != nil {
			return nil, err
		}
		if isEOF(b) {
			return rows, nil
		}
		if len(b) > 0 && b[0] == 0xff {
			return nil, myErr(b)
		}
		row, err := myRow(b, ncol)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
}

// myRow decodes one text-protocol row of ncol length-encoded strings.
func myRow(b []byte, ncol uint64) ([]string, error) {
	row := make([]string, 0, ncol)
	for i := uint64(0); i < ncol; i++ {
		l, n, null, err := lenenc(b)
		if err != nil {
			return nil, err
		}
		b = b[n:]
		if null {
			row = append(row, "")
			continue
		}
		if l > uint64(len(b)) {
			return nil, errors.New("mysql: bad row")
		}
		row = append(row, string(b[:l]))
		b = b[l:]
	}
	return row, nil
}

// mysqlReady is the readiness check: a real login as root and SELECT 1.
func mysqlReady(ctx context.Context, addr string) error {
	rows, err := mysqlQuery(ctx, addr, "root", "", "SELECT 1")
	return selectedOne("mysql", rows, err)
}

// selectedOne checks the answer of a readiness query "SELECT 1".
func selectedOne(server string, rows [][]string, err error) error {
	if err != nil {
		return err
	}
	if len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] != "1" {
		return fmt.Errorf("%s: SELECT 1 gave %v", server, rows)
	}
	return nil
}
