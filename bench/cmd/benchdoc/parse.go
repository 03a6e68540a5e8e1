package main

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// result is the medians of one benchmark's runs.
type result struct {
	backend  string             // Redis, Etcd...
	lib      string             // dlock, dlock-fair, redsync...
	workload string             // Uncontended, Contended, Herd/100...
	metrics  map[string]float64 // unit -> median
	runs     int
}

// results is every benchmark of the output, and those that failed.
type results struct {
	list   []*result
	failed []string
}

func (rs results) len() int { return len(rs.list) }

// get returns the result of lib on workload of backend, or nil.
func (rs results) get(backend, lib, workload string) *result {
	for _, r := range rs.list {
		if r.backend == backend && r.lib == lib && r.workload == workload {
			return r
		}
	}
	return nil
}

// in returns the results of backend, in the order of the output.
func (rs results) in(backend string) []*result {
	var out []*result
	for _, r := range rs.list {
		if r.backend == backend {
			out = append(out, r)
		}
	}
	return out
}

// backends returns the backends, in the order of the output.
func (rs results) backends() []string {
	var out []string
	for _, r := range rs.list {
		if !slices.Contains(out, r.backend) {
			out = append(out, r.backend)
		}
	}
	return out
}

var (
	benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)
	failLine  = regexp.MustCompile(`^\s*--- FAIL: Benchmark(\S+)`)
)

// parse reads go test -bench output: every line of a benchmark's figures,
// grouped by name, the medians of its runs.
func parse(out string) results {
	runs := map[string][]map[string]float64{}
	var order []string
	var rs results
	for _, line := range strings.Split(out, "\n") {
		if m := failLine.FindStringSubmatch(line); m != nil && strings.Count(m[1], "/") >= 2 {
			rs.failed = append(rs.failed, m[1])
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil || strings.Count(m[1], "/") < 2 {
			continue
		}
		f := strings.Fields(m[3])
		metrics := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				metrics[f[i+1]] = v
			}
		}
		if _, ok := runs[m[1]]; !ok {
			order = append(order, m[1])
		}
		runs[m[1]] = append(runs[m[1]], metrics)
	}
	for _, name := range order {
		backend, lib, workload := split(name)
		rs.list = append(rs.list, &result{backend: backend, lib: lib, workload: workload, metrics: medians(runs[name]), runs: len(runs[name])})
	}
	rs.failed = slices.DeleteFunc(rs.failed, func(f string) bool {
		// A benchmark fails with its sub-benchmark: keep the latter.
		return slices.ContainsFunc(rs.failed, func(g string) bool { return strings.HasPrefix(g, f+"/") })
	})
	return rs
}

// split splits Backend/lib/Workload; dlocktest.Bench's Backend/lib/Fair/W
// is lib-fair's W, and its Backend/lib/Default/W lib's.
func split(name string) (backend, lib, workload string) {
	parts := strings.SplitN(name, "/", 3)
	backend, lib, workload = parts[0], parts[1], parts[2]
	if w, ok := strings.CutPrefix(workload, "Default/"); ok {
		workload = w
	} else if w, ok := strings.CutPrefix(workload, "Fair/"); ok {
		lib, workload = lib+"-fair", w
	}
	return backend, lib, workload
}

// medians is the median of each unit over runs.
func medians(runs []map[string]float64) map[string]float64 {
	vals := map[string][]float64{}
	for _, r := range runs {
		for u, v := range r {
			vals[u] = append(vals[u], v)
		}
	}
	out := map[string]float64{}
	for u, vs := range vals {
		slices.Sort(vs)
		n := len(vs)
		if n%2 == 1 {
			out[u] = vs[n/2]
		} else {
			out[u] = (vs[n/2-1] + vs[n/2]) / 2
		}
	}
	if _, ok := out["ops/s"]; !ok && out["ns/op"] > 0 {
		out["ops/s"] = 1e9 / out["ns/op"]
	}
	return out
}

// isPeer says whether lib is another library than dlock (floor is a
// bound, not a lock).
func isPeer(lib string) bool { return !strings.HasPrefix(lib, "dlock") && lib != "floor" }
