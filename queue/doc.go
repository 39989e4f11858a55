// Package queue runs queue workers that process each item under a managed,
// fenced lease keyed by the item, on top of any at-least-once [Source].
//
//	w, _ := queue.New(client, source, queue.Options{
//		Concurrency: 8, Policy: policy,
//		Handler: func(ctx context.Context, it queue.Item, token lease.Token) error {
//			return store.Apply(ctx, token, it.Payload) // fenced by token
//		},
//	})
//	_ = w.Start(ctx)
//	defer w.Stop(ctx)
//
// At-least-once sources deliver an item again when its visibility timeout
// passes while a worker still works on it, so two workers can hold the same
// item. For each delivery a worker:
//
//  1. takes the item's lease, "<namespace>/<item ID>", with one TryAcquire;
//     if another worker holds it, the delivery is left alone (Contended) —
//     the holder acks it, or the source redelivers it later;
//  2. starts managed renewal and runs the handler with the lease's token
//     and a ctx canceled when the lease is lost or expires;
//  3. on success, confirms the lease with the backend (Validate), checks it
//     is still Active and only then acks, with the ack bounded by the lease's
//     deadline (fenced completion). A handler whose lease was lost never
//     acks: the item is left for redelivery (Lost);
//  4. on failure (an error or a panic), releases the lease and nacks, so the
//     item is redelivered at once;
//  5. stops renewal and releases the lease, and reports the delivery
//     (Options.OnEvent) with the release's error, if any (Event.ReleaseErr).
//
// # Guarantees
//
//   - Two deliveries of one item are never handled at once by workers
//     sharing a backend and a namespace, while leases are honoured: a
//     handler's ctx is canceled at its lease's deadline, before another
//     worker can take the lease. A handler that ignores its ctx is not
//     stopped: write through the token (leaseapi.Token) so that the
//     resource rejects it once a later delivery's lease has a higher one.
//   - An ack is sent only after the lease was confirmed by the backend and
//     while it is Active locally. The ack itself is not fenced by the
//     source (a source cannot check a token): in the instant between that
//     check and the ack landing, the lease may end; the margin between the
//     local deadline and the backend's expiry covers clock drift, not a
//     stalled ack. A source that can check the token in the ack (a
//     PostgreSQL table with a fencing column) closes that gap.
//   - At most Concurrency items are processed at once per Worker.
//   - Processing stays at least once: an item may be handled more than once
//     in sequence (a lost lease, a crash before the ack); handlers must be
//     idempotent or fenced.
//
// # Goroutines
//
// Start starts Concurrency goroutines (receive, then process one item) and
// one that waits for them; all exit when Stop is called, after their
// current item is done. Each item's handler runs on its worker goroutine,
// with one watcher goroutine that exits before the item is acked or nacked.
// [MemorySource] starts none.
//
// # Failure handling
//
// A lease that cannot be taken (backend unavailable, ambiguous, capacity)
// leaves the delivery to the source's redelivery (Failed), and the worker
// pauses Backoff before the next Receive, so a down backend does not
// drain the source into failures. A failed
// Receive is retried after Backoff (at least [MinBackoff]). A lease lost
// during the handler cancels its ctx and leaves the item (Lost). Every
// delivery is reported once through Options.OnEvent; the package never
// logs. An item whose ID is empty or not a valid key name is never
// processed (Failed each time it is delivered, then a pause of Backoff,
// so a source that answers at once with nothing cannot make a worker
// spin): sources must use key-safe IDs (stream entry ids, numeric primary
// keys). A delivery that Receive returns after Stop is nacked unprocessed,
// so Stop never waits on a source that ignores its ctx more than once.
//
// A release that fails after an item was handled is reported in
// Event.ReleaseErr (ErrBackendUnavailable: the lease is still held;
// ErrAmbiguousOutcome: it may be); the lease then ends at its TTL, and
// redeliveries of the item are Contended until then. Never read "the
// delivery was reported" as "the lease was released".
//
// A panic in the handler, in Options.OnEvent or in a Source method is
// recovered and reported as a [PanicError]; it never crashes the process
// and the item's lease is still released.
//
// # Adapting a real queue
//
// Valkey / Redis Streams with a consumer group:
//
//   - Receive: XREADGROUP GROUP g <consumer> COUNT 1 BLOCK <ms> STREAMS s >
//     for new entries, and periodically XAUTOCLAIM s g <consumer>
//     <min-idle-time> 0 COUNT n to take over entries whose consumer went
//     silent (min-idle-time plays the visibility timeout). Item.ID is the
//     entry id ("1700000000000-0"), the same in every delivery; Receipt may
//     be the consumer name.
//   - Ack: XACK s g <id> (and XDEL if entries should not be kept).
//   - Nack: no direct command; either do nothing (XAUTOCLAIM will reclaim it
//     after min-idle-time) or XCLAIM it with IDLE <min-idle-time> so that the
//     next XAUTOCLAIM takes it at once.
//
// PostgreSQL with FOR UPDATE SKIP LOCKED, items in a table (id, payload,
// visible_at):
//
//   - Receive: UPDATE items SET visible_at = now() + interval '<visibility>'
//     WHERE id = (SELECT id FROM items WHERE visible_at <= now() ORDER BY
//     id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, payload — one short
//     transaction, so rows are not locked while the handler runs (the lease
//     does that job across workers); poll or LISTEN for new rows.
//   - Ack: DELETE FROM items WHERE id = $1 (optionally in the same
//     transaction as postgres.Store.Fence and the handler's writes, which
//     fences the ack too).
//   - Nack: UPDATE items SET visible_at = now() WHERE id = $1.
//
// # What this package does not do
//
//   - No ordering, deduplication, dead-lettering or retry counting: those
//     belong to the source (count deliveries there and dead-letter poison
//     items).
//   - No batching: one lease and one ack per item.
//   - It does not extend the source's visibility timeout while a handler
//     runs; the item lease keeps other workers out instead, at the cost of
//     redeliveries that end Contended. Choose a visibility timeout longer
//     than typical handling.
package queue
