package redlock

// Woken returns how many times release notices woke a waiter of b.
func Woken(b *Backend) int64 { return b.woken.Load() }
