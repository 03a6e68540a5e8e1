// Package fence has guards that enforce dlock's fencing tokens at the
// resource a lock protects.
//
// A lease can be lost while its holder still works — a process paused
// past its TTL, a network partition — and then two processes may write at
// once. A lock alone cannot prevent that; the resource can, if every
// write carries the writer's token (dlock.Lease.Token) and the resource
// refuses a token lower than one it has already accepted. Tokens strictly
// increase with every grant of a lock name, so the holder of a lost lease
// is refused as soon as the next holder has written.
//
// # What the guarantee rests on
//
// [SQL] keeps the highest accepted token per resource in a table of the
// protected database and checks and raises it with one conditional
// upsert in the caller's own transaction, before the caller's writes. The
// upsert locks the resource's row until the transaction ends, so a
// concurrent transaction with an older token waits and is then refused;
// if the caller's transaction rolls back, so does the raise. The check is
// only as good as the discipline of the writers: every write to the
// resource must go through a transaction that calls [SQL.Check] first.
package fence
