// Package notify holds the wake-up machinery the backends share: a [Hub]
// that shares one pub/sub connection among the waiters of many channels,
// a [Broadcast] that wakes every waiter at once, and a [Relay] that runs a
// watcher while it has subscribers and broadcasts what it sees.
//
// A backend keeps only its policy: what a notice names and whom it wakes
// ([Policy]), or what its watcher watches.
//
// # Guarantees
//
//   - A waiter attached to a confirmed subscription ([Hub.Confirmed]) hears
//     every notice published on its channel from then on, or is told to
//     look again ([Policy.Retry]) if one may have been lost.
//   - A lost connection, a failed SUBSCRIBE and a connection that stays
//     silent past a PING all count as a loss: every waiter is told to look
//     again at once, and again when its subscription is confirmed on the
//     next connection, which subscribes every channel anew.
//   - Close stops every goroutine the hub, relay or timer started and waits
//     for them.
//
// # How it works
//
// The hub keeps a subscription per channel, counted by its waiters; one
// left without waiters lingers (a channel waited on once is likely to be
// waited on again) and is then dropped. A SUBSCRIBE is confirmed by the
// server's reply; while several are in flight on one channel, only the
// reply to the last confirms it. One goroutine reads the connection; when
// nothing arrives for a while it sends a PING, and when the reply does not
// come in time it closes the connection and dials a new one, as it does
// after any error.
package notify
