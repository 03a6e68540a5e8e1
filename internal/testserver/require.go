package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Kind names a kind of server, as used in DLOCK_TEST_REQUIRE.
type Kind string

// The server kinds this package can start.
const (
	KindRedis     Kind = "redis"
	KindZooKeeper Kind = "zookeeper"
	KindEtcd      Kind = "etcd"
	KindPostgres  Kind = "postgres"
	KindMariaDB   Kind = "mariadb"
)

// RequireEnv is the environment variable that turns a missing server from a
// skip into a failure: "all", or a comma-separated list of kinds.
const RequireEnv = "DLOCK_TEST_REQUIRE"

// KeepEnv is the environment variable that, when set to a true value
// ("1", "true", "yes"), keeps the servers' temporary directories after the test.
const KeepEnv = "DLOCK_TEST_KEEP"

var kindAliases = map[string]Kind{
	"redis": KindRedis, "redis-server": KindRedis, "sentinel": KindRedis, "redlock": KindRedis,
	"zookeeper": KindZooKeeper, "zk": KindZooKeeper,
	"etcd":     KindEtcd,
	"postgres": KindPostgres, "postgresql": KindPostgres, "pg": KindPostgres,
	"mariadb": KindMariaDB, "mysql": KindMariaDB,
}

// Required reports whether DLOCK_TEST_REQUIRE asks for servers of this kind,
// that is, whether a missing server must fail the test rather than skip it.
func Required(kind Kind) bool {
	v := strings.TrimSpace(os.Getenv(RequireEnv))
	if v == "" {
		return false
	}
	for _, f := range strings.FieldsFunc(strings.ToLower(v), func(r rune) bool { return r == ',' || r == ' ' }) {
		if f == "all" || f == "*" || f == string(kind) || kindAliases[f] == kind {
			return true
		}
	}
	return false
}

// Unavailable ends the test because a server of the given kind cannot be
// used: it calls t.Skip, or t.Fatal when DLOCK_TEST_REQUIRE requires the kind.
// Backend tests use it for their own preconditions.
func Unavailable(t T, kind Kind, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required(kind) {
		t.Fatalf("%s (required by %s=%q)", msg, RequireEnv, os.Getenv(RequireEnv))
		return
	}
	t.Skip(msg)
}

// Need returns the path of binary, or ends the test through Unavailable
// with a message naming the Debian package pkg to install. Besides PATH it
// looks in /usr/sbin, /usr/local/sbin and /usr/lib/postgresql/*/bin (newest
// version first).
func Need(t T, kind Kind, binary, pkg string) string {
	t.Helper()
	if p, err := lookBinary(binary); err == nil {
		return p
	}
	Unavailable(t, kind, "%s not found: apt-get install %s", binary, pkg)
	return ""
}

// Require checks that everything needed to start servers of the given kind is
// installed, and otherwise ends the test through Unavailable (skip, or fail
// under DLOCK_TEST_REQUIRE) naming the Debian package to install.
func Require(t T, kind Kind) {
	t.Helper()
	if err := Available(kind); err != nil {
		Unavailable(t, kind, "%v", err)
	}
}

// Available returns nil if everything needed to start servers of the given
// kind is installed, or an error naming what is missing and the Debian package
// to install.
func Available(kind Kind) error {
	switch kind {
	case KindRedis:
		return haveBinaries("redis-server", "redis-server")
	case KindEtcd:
		return haveBinaries("etcd-server", "etcd")
	case KindPostgres:
		if err := haveBinaries("postgresql", "initdb", "postgres"); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if _, _, err := postgresUser(); err != nil {
				return err
			}
		}
		return nil
	case KindMariaDB:
		return haveBinaries("mariadb-server", "mariadbd", "mariadb-install-db")
	case KindZooKeeper:
		if err := haveBinaries("default-jre-headless", "java"); err != nil {
			return err
		}
		if _, err := zkClassPath(); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("testserver: unknown server kind %q", kind)
}

func haveBinaries(pkg string, binaries ...string) error {
	for _, b := range binaries {
		if _, err := lookBinary(b); err != nil {
			return fmt.Errorf("%s not found: apt-get install %s", b, pkg)
		}
	}
	return nil
}

// lookBinary finds a server binary in PATH or in the directories Debian
// installs servers into.
func lookBinary(name string) (string, error) {
	// Prefer the versioned PostgreSQL directory so that initdb and postgres
	// come from the same installation.
	if name == "initdb" || name == "postgres" || name == "pg_ctl" {
		if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
			sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
			for _, d := range dirs {
				if p := filepath.Join(d, name); isExecutable(p) {
					return p, nil
				}
			}
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/local/bin", "/usr/bin"} {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func pgVersion(binDir string) int {
	v := filepath.Base(filepath.Dir(binDir))
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Version returns the version line a server of the kind ("redis",
// "zookeeper", "etcd", "postgres", "mysql" or "mariadb") prints, or
// "unknown", for reports that name the servers they ran against.
func Version(kind string) string {
	var bin string
	var args []string
	switch kind {
	case "redis", "redlock":
		bin, args = "redis-server", []string{"--version"}
	case "etcd":
		bin, args = "etcd", []string{"--version"}
	case "postgres":
		bin, args = "postgres", []string{"--version"}
	case "mysql", "mariadb":
		bin, args = "mariadbd", []string{"--version"}
	case "zookeeper":
		// The Debian package links zookeeper-VERSION.jar to its jar.
		ms, _ := filepath.Glob(filepath.Join(filepath.Dir(zkJar), "zookeeper-[0-9]*.jar"))
		if len(ms) == 0 {
			return "unknown"
		}
		return "ZooKeeper " + strings.TrimSuffix(strings.TrimPrefix(filepath.Base(ms[0]), "zookeeper-"), ".jar")
	default:
		return "unknown"
	}
	p, err := lookBinary(bin)
	if err != nil {
		return "unknown"
	}
	out, err := exec.Command(p, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
