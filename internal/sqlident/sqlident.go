// Package sqlident checks the table names that dlock writes into SQL
// statements, where they cannot be passed as parameters.
package sqlident

// Plain reports whether name is a plain identifier: one or more ASCII
// letters, digits and underscores, not starting with a digit. PostgreSQL,
// MySQL and SQLite all take it unquoted, and it cannot smuggle SQL into a
// statement.
func Plain(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
