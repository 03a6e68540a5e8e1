package verify

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/internal/redact"
)

// writeReport writes report.md, grants.png and result.json to dir.
func writeReport(dir string, rep *Report) error {
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(reportMarkdown(rep)), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "grants.png"))
	if err != nil {
		return err
	}
	if err := WriteChart(f, rep.history, rep.Result); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	j, err := json.MarshalIndent(resultJSON(rep), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "result.json"), append(j, '\n'), 0o644)
}

// reportMarkdown is the text of report.md.
func reportMarkdown(rep *Report) string {
	res := rep.Result
	var b strings.Builder
	cfg := rep.Config
	fmt.Fprintf(&b, "# dlock verify\n\n%s\n\n", rep.Summary())
	fmt.Fprintf(&b, "| setting | value |\n|---|---|\n| url | `%s` |\n| lock | `%s` (%s) |\n| workers | %d (%d started) |\n| duration | %v |\n| ttl | %v |\n| fair | %v |\n| faults | %s |\n| seed | %d |\n| mutation | %s |\n| started | %s |\n\n",
		redact.String(cfg.URL), cfg.Name, describeKind(res.Kind, res.Limit), cfg.Workers, rep.Workers, cfg.Duration, cfg.TTL, cfg.Fair,
		orNone(strings.Join(cfg.Faults, ",")), cfg.Seed, orNone(cfg.Mutate), rep.Started.UTC().Format(time.RFC3339))
	if cfg.Local != nil {
		fmt.Fprintf(&b, "Servers started by the command (--local %s): %s.\n\n", cfg.Local.Kind, cfg.Local.Version)
	}
	writeFaultTable(&b, rep)
	fmt.Fprintf(&b, "| check | violations | outside assumptions (labelled) |\n|---|---|---|\n")
	promise := "(a) no grant inside another's validity"
	switch res.Kind {
	case KindSemaphore:
		promise = fmt.Sprintf("(a) never more than %d valid permits at once", res.Limit)
	case KindRW:
		promise = "(a) no reader valid beside a writer, no two writers"
	case KindElection:
		promise = "(a) one leader at a time"
	}
	order := "(b) tokens increase in grant order"
	if res.Kind == KindElection {
		order = "(b) terms increase in grant order"
	}
	for _, c := range []struct{ id, name string }{
		{CheckPromise, promise},
		{CheckOrder, order},
		{CheckFence, "(c) the resource accepted no stale token"},
		{CheckOverlap, "raw overlap (reported, not a failure)"},
	} {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", c.name, res.Count(c.id), res.Labelled(c.id))
	}
	fmt.Fprintf(&b, "\nporcupine (the grants as a lock history, each release at the end of a validity): %s", rep.Porcupine)
	if len(res.Grants) <= maxVisualized {
		fmt.Fprintf(&b, "; open `history.html` to see it")
	}
	b.WriteString(".\n")
	fmt.Fprintf(&b, "\nWrites: %d, accepted %d, refused as stale %d; lost updates %d (%.2f%% of accepted).\n",
		res.Writes, res.Accepted, res.Writes-res.Accepted, res.LostUpdates, 100*res.LostUpdateRate())
	if res.Kind == KindSemaphore {
		fmt.Fprintf(&b, "The permits do no fenced write: up to %d of them are valid at once, and a single token cannot tell them apart (a resource that must see one writer at a time needs a mutex); (c) has nothing to check.\n", res.Limit)
	}
	if n := len(res.KillToGrant); n > 0 {
		fmt.Fprintf(&b, "Kill to next grant over %d kills: p50 %v, p99 %v.\n", n,
			Percentile(res.KillToGrant, 50).Round(time.Millisecond), Percentile(res.KillToGrant, 99).Round(time.Millisecond))
	}
	writeViolations(&b, res.Violations)
	fmt.Fprintf(&b, "\nHistories: `history/worker-N.jsonl` (events), `history/resource.jsonl` (the resource's serial log), `history/faults.json`.\n")
	fmt.Fprintf(&b, "\n![grants per worker](grants.png)\n")
	return b.String()
}

// writeFaultTable writes how often each configured fault was injected.
func writeFaultTable(b *strings.Builder, rep *Report) {
	fmt.Fprintf(b, "| fault | injected | outside assumptions |\n|---|---|---|\n")
	for _, k := range rep.Config.Faults {
		n, out := 0, ""
		for _, f := range rep.Faults {
			if f.Kind == k {
				n++
				if f.Outside {
					out = f.Label
				}
			}
		}
		fmt.Fprintf(b, "| %s | %d | %s |\n", k, n, out)
	}
	b.WriteString("\n")
}

// writeViolations lists the first 20 violations (raw overlaps left out).
func writeViolations(b *strings.Builder, vs []Violation) {
	bad := 0
	for _, v := range vs {
		if v.Check == CheckOverlap {
			continue
		}
		if bad == 0 {
			fmt.Fprintf(b, "\n## First violations\n\n")
		}
		if bad++; bad > 20 {
			break
		}
		label := ""
		if v.Outside != "" {
			label = " [outside the assumptions: " + v.Outside + "]"
		}
		fmt.Fprintf(b, "- (%s) at t=%d ns: %s%s\n", v.Check, v.T, v.Detail, label)
	}
}

// resultJSON is the content of result.json.
func resultJSON(rep *Report) map[string]any {
	res, cfg := rep.Result, rep.Config
	out := map[string]any{
		"pass":            !res.Failed(),
		"url":             redact.String(cfg.URL),
		"kind":            res.Kind,
		"limit":           res.Limit,
		"workers":         cfg.Workers,
		"workers_started": rep.Workers,
		"duration_s":      cfg.Duration.Seconds(),
		"ttl_s":           cfg.TTL.Seconds(),
		"fair":            cfg.Fair,
		"faults":          cfg.Faults,
		"seed":            cfg.Seed,
		"mutation":        cfg.Mutate,
		"grants":          len(res.Grants),
		"faults_injected": len(rep.Faults),
		"violations": map[string]int{
			"a": res.Count(CheckPromise), "b": res.Count(CheckOrder), "c": res.Count(CheckFence),
			"a_outside": res.Labelled(CheckPromise), "b_outside": res.Labelled(CheckOrder), "c_outside": res.Labelled(CheckFence),
		},
		"raw_overlaps":     res.Count(CheckOverlap),
		"porcupine":        rep.Porcupine,
		"writes":           res.Writes,
		"accepted":         res.Accepted,
		"lost_updates":     res.LostUpdates,
		"lost_update_rate": res.LostUpdateRate(),
		"kill_to_grant_ms": durationsMS(res.KillToGrant),
	}
	if cfg.Local != nil {
		out["local"] = cfg.Local.Kind
		out["server_version"] = cfg.Local.Version
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func durationsMS(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}
