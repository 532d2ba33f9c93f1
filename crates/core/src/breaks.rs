//! Deliberate bugs, compiled only with the `break` feature, for the
//! simulator's `--break` flags: they show that its checkers can fail. The
//! switches are per thread, and a simulation runs on one thread.

use std::cell::Cell;

thread_local! {
    static SKIP_FENCING: Cell<bool> = const { Cell::new(false) };
    static ACK_BEFORE_COMMIT: Cell<bool> = const { Cell::new(false) };
    static SPLIT_BATCH: Cell<bool> = const { Cell::new(false) };
    static PRUNE_ACTIVE: Cell<bool> = const { Cell::new(false) };
    static SEND_SEALED: Cell<bool> = const { Cell::new(false) };
    static OUT_OF_TURN: Cell<bool> = const { Cell::new(false) };
    static INBOUND_DEDUPE: Cell<bool> = const { Cell::new(false) };
}

/// `--break fencing`: `apply` accepts outcomes whatever their token.
pub fn set_skip_fencing(on: bool) {
    SKIP_FENCING.with(|c| c.set(on));
}

pub fn skip_fencing() -> bool {
    SKIP_FENCING.with(Cell::get)
}

/// `--break ack-before-commit`: the API answers 202 before the event commits.
pub fn set_ack_before_commit(on: bool) {
    ACK_BEFORE_COMMIT.with(|c| c.set(on));
}

pub fn ack_before_commit() -> bool {
    ACK_BEFORE_COMMIT.with(Cell::get)
}

/// `--break split-batch`: `POST /v1/events/batch` commits the two halves of
/// a batch as two log entries, one after the other.
pub fn set_split_batch(on: bool) {
    SPLIT_BATCH.with(|c| c.set(on));
}

pub fn split_batch() -> bool {
    SPLIT_BATCH.with(Cell::get)
}

/// `--break prune-active`: a `Prune` removes old events whatever their
/// deliveries' states, dropping work still to do.
pub fn set_prune_active(on: bool) {
    PRUNE_ACTIVE.with(|c| c.set(on));
}

pub fn prune_active() -> bool {
    PRUNE_ACTIVE.with(Cell::get)
}

/// `--break send-sealed`: an endpoint actor sends (and signs) a payload's
/// bytes as stored, sealed, instead of the plaintext it opened.
pub fn set_send_sealed(on: bool) {
    SEND_SEALED.with(|c| c.set(on));
}

pub fn send_sealed() -> bool {
    SEND_SEALED.with(Cell::get)
}

/// `--break ordering`: an endpoint actor attempts an ordered delivery
/// whether or not it is its key's head, as if the endpoint were unordered.
pub fn set_out_of_turn(on: bool) {
    OUT_OF_TURN.with(|c| c.set(on));
}

pub fn out_of_turn() -> bool {
    OUT_OF_TURN.with(Cell::get)
}

/// `--break inbound-dedupe`: the inbound ingress makes each request's
/// idempotency key its own, so a repeat of a provider event creates a
/// second event.
pub fn set_inbound_dedupe(on: bool) {
    INBOUND_DEDUPE.with(|c| c.set(on));
}

pub fn inbound_dedupe() -> bool {
    INBOUND_DEDUPE.with(Cell::get)
}
