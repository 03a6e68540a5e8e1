package sqlite

// PrivateLocal gives a Backend in-process state of its own, as if it were
// in another process: only the data_version poll wakes its waiters on
// releases by other Backends.
var PrivateLocal = privateLocal
