package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// statusPoll is how often dlock status --watch without names reads the
// listing: Client.Watch follows one name, not a prefix.
const statusPoll = time.Second

// watchStatus follows the holders of names (every lock under --prefix
// without names) until a signal: on a terminal the table is redrawn in
// place, otherwise a line (a JSON object with --json) per change.
func watchStatus(ctx context.Context, e *env, client *dlock.Client, f *statusFlags, names []string) int {
	sigs := notifyForwarded()
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	changes := make(chan dlock.Holders)
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	if len(names) > 0 {
		chans := make([]<-chan dlock.Holders, 0, len(names))
		for _, n := range names {
			hs, err := client.Watch(ctx, n)
			if err != nil {
				close(done)
				e.errorf("%v", err)
				return errorCode(err)
			}
			chans = append(chans, hs)
		}
		go func() {
			defer close(done)
			merge(ctx, chans, changes)
		}()
	} else {
		go func() {
			defer close(done)
			pollStatus(ctx, client, f.prefix, changes)
		}()
	}
	tty := isTerminal(e.stdout) && !f.json
	state := map[string][]dlock.LockInfo{}
	for {
		var h dlock.Holders
		select {
		case <-ctx.Done():
			return exitOK
		case h = <-changes:
		}
		if h.Err != nil {
			e.errorf("%v", h.Err)
			continue
		}
		if len(h.Holders) == 0 {
			delete(state, h.Name)
		} else {
			state[h.Name] = h.Holders
		}
		switch {
		case tty:
			var all []dlock.LockInfo
			for _, hs := range state {
				all = append(all, hs...)
			}
			sortInfos(all)
			fmt.Fprint(e.stdout, "\x1b[H\x1b[2J")
			fmt.Fprintf(e.stdout, "%s  %s (Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly), client)
			if len(all) == 0 {
				fmt.Fprintln(e.stdout, "no locks held")
			} else {
				printTable(e.stdout, all)
			}
		case f.json:
			hs := make([]jsonInfo, 0, len(h.Holders))
			for _, in := range h.Holders {
				hs = append(hs, toJSON(in))
			}
			b, _ := json.Marshal(struct {
				Name    string     `json:"name"`
				Holders []jsonInfo `json:"holders"`
			}{h.Name, hs})
			fmt.Fprintf(e.stdout, "%s\n", b)
		default:
			fmt.Fprintln(e.stdout, changeLine(h))
		}
	}
}

// changeLine is one line of status --watch off a terminal.
func changeLine(h dlock.Holders) string {
	if len(h.Holders) == 0 {
		return cell(h.Name) + ": free"
	}
	held := make([]string, len(h.Holders))
	for i, in := range h.Holders {
		held[i] = describeInfo(in)
		if in.Value != "" {
			held[i] += " value " + cell(in.Value)
		}
	}
	return cell(h.Name) + ": held by " + strings.Join(held, ", ")
}

// merge forwards what chans send to out until they close or ctx ends.
func merge(ctx context.Context, chans []<-chan dlock.Holders, out chan<- dlock.Holders) {
	done := make(chan struct{}, len(chans))
	for _, c := range chans {
		go func() {
			defer func() { done <- struct{}{} }()
			for h := range c {
				select {
				case out <- h:
				case <-ctx.Done():
				}
			}
		}()
	}
	for range chans {
		<-done
	}
}

// pollStatus reads the listing every statusPoll and sends the names whose
// holders changed (a name no longer listed with no holders).
func pollStatus(ctx context.Context, client *dlock.Client, prefix string, out chan<- dlock.Holders) {
	last := map[string][]dlock.LockInfo{}
	send := func(h dlock.Holders) bool {
		select {
		case out <- h:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, inspectTimeout)
		infos, err := client.Inspect(rctx, prefix)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !send(dlock.Holders{Err: err}) {
				return
			}
		} else {
			sortInfos(infos)
			now := map[string][]dlock.LockInfo{}
			var order []string
			for _, in := range infos {
				key := nameCell(in)
				if _, ok := now[key]; !ok {
					order = append(order, key)
				}
				now[key] = append(now[key], in)
			}
			for key := range last {
				if _, ok := now[key]; !ok {
					order = append(order, key)
				}
			}
			for _, key := range order {
				if sameInfos(last[key], now[key]) {
					continue
				}
				if !send(dlock.Holders{Name: key, Holders: now[key]}) {
					return
				}
			}
			last = now
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(statusPoll):
		}
	}
}

// sameInfos reports whether a and b are the same holds, their TTLs aside.
func sameInfos(a, b []dlock.LockInfo) bool {
	return slices.EqualFunc(a, b, func(x, y dlock.LockInfo) bool {
		x.TTL, y.TTL, x.Waiters, y.Waiters, x.Queued, y.Queued = 0, 0, 0, 0, 0, 0
		return x == y
	})
}
