//! Micro-benchmark of one webhook attempt through the production transport:
//! the request built and signed (`build_request`) and sent with
//! `HttpTransport` to a receiver on loopback in the same process, which
//! reads the whole body and answers 200. Attempts go one at a time over one
//! pooled connection, so the figure is the node's cost of an attempt plus the
//! receiver's and the loopback's, which do not change with the node.
//!
//! - `attempt/200B`: the throughput scenario's payload.
//! - `attempt/64KiB`: a large event, where copies of the payload show.
//!
//! Run: `cargo bench -p hookraft-delivery --bench attempt`
//! (quicker: append `-- --warm-up-time 1 --measurement-time 3`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::model::Endpoint;
use hookraft_core::signing::Secret;
use hookraft_delivery::attempt::{AttemptPlan, build_request};
use hookraft_delivery::http::HttpTransport;
use hookraft_delivery::transport::{SendOrigin, Target, Transport};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::runtime::Runtime;

const NOW_MS: u64 = 1_700_000_000_000;

/// A receiver on loopback that takes the whole body and answers 200.
fn start_receiver(runtime: &Runtime) -> String {
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let app = Router::new().route("/hook", post(|body: Bytes| async move { body.len().to_string() }));
        tokio::spawn(async move { axum::serve(listener, app).await.expect("receiver serves") });
        format!("http://{addr}/hook")
    })
}

fn bench_attempt(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let url = start_receiver(&runtime);
    let transport = HttpTransport::new(true).expect("client builds");
    let mut rng = StdRng::seed_from_u64(7);
    let id = EndpointId::generate(NOW_MS, &mut rng);
    let secret = Secret::generate(&mut rng);
    let endpoint = Endpoint::new(id, url.clone(), (&secret).into(), NOW_MS);
    let target = Target::new(&url);
    let event_id = EventId::generate(NOW_MS, &mut rng);

    let mut group = c.benchmark_group("attempt");
    group.throughput(Throughput::Elements(1));
    for (name, bytes) in [("200B", 200), ("64KiB", 64 * 1024)] {
        let payload: Arc<[u8]> = format!("{{\"pad\":\"{}\"}}", "x".repeat(bytes - 10)).into_bytes().into();
        let plan = AttemptPlan {
            delivery_id: DeliveryId::derive(&event_id, &endpoint.id),
            event_id,
            payload,
            attempt_number: 1,
            ordering: None,
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                let request =
                    build_request(&endpoint, &[&secret], target.clone(), &plan, NOW_MS, SendOrigin::default());
                let answer = runtime.block_on(transport.send(request)).expect("the receiver answers");
                assert_eq!(answer.status, 200);
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5));
    targets = bench_attempt
}
criterion_main!(benches);
