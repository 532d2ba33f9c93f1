//! The outbox pattern with `hookraft-receiver` and SQLite.
//!
//! A service that receives "order changed" webhooks keeps its orders in
//! SQLite. For each event it records, in ONE transaction: the event id and
//! the order's revision (so duplicates and stale revisions are recognised),
//! the order's new state, and the notification it owes downstream (a row
//! of the `outbox` table). A runner sends the pending notifications after
//! commit and marks them sent; each carries an idempotency key, so a crash
//! between sending and marking is harmless.
//!
//! - `shop.rs`: the schema, the transaction, the inbox's store over it;
//! - `runner.rs`: the outbox runner.
//!
//! `cargo run -p hookraft-receiver --example outbox` plays a few deliveries
//! (a duplicate, one out of order) and prints what happened;
//! `cargo test -p hookraft-receiver --example outbox` runs the crash tests.

mod runner;
mod shop;
#[cfg(test)]
mod tests;

use hookraft_receiver::{Request, Secret};

use crate::runner::{Dispatch, Effect};
use crate::shop::Service;

/// A fixed clock: the example replays a scenario, it does not serve.
const NOW_S: u64 = 1_700_000_000;

/// Prints each effect as the downstream would receive it.
struct Printer;

impl Dispatch for Printer {
    fn dispatch(&mut self, effect: &Effect) -> Result<(), String> {
        println!("  notify {} (idempotency key {})", effect.body, effect.idempotency_key);
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
    let service = Service::open(&dir.path().join("shop.sqlite"), vec![secret.clone()])?;
    let deliveries = [
        ("evt_1", r#"{"order_id":"ord_1","revision":1,"status":"created"}"#),
        ("evt_1", r#"{"order_id":"ord_1","revision":1,"status":"created"}"#),
        ("evt_3", r#"{"order_id":"ord_1","revision":3,"status":"shipped"}"#),
        ("evt_2", r#"{"order_id":"ord_1","revision":2,"status":"paid"}"#),
    ];
    for (id, body) in deliveries {
        let signature = hookraft_core::signing::sign(&secret, id, NOW_S, body.as_bytes());
        let timestamp = NOW_S.to_string();
        let request = Request {
            id: Some(id),
            timestamp: Some(&timestamp),
            signature: Some(&signature),
            body: body.as_bytes(),
            ..Request::default()
        };
        println!("{id} {body}: {:?}", service.handle(&request, NOW_S)?);
    }
    println!("order ord_1: {:?}", service.shop.order("ord_1")?);
    println!("outbox run:");
    let report = runner::run_once(&service.shop, &mut Printer, NOW_S)?;
    println!("{report:?}");
    Ok(())
}
