//! Inbound sources end to end: provider webhooks signed as each provider
//! signs them (computed here, independently of hookraft's code), repeats
//! of one provider event, the stale guard, and the ingress's refusals.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hookraft_tests::at_rest::{hex, hmac_sha256 as mac};
use hookraft_tests::{
    DEADLINE, NodeOptions, ScriptedReceiver, StatusCode, TestNode, assert_problem, list_deliveries, register_endpoint,
    unix_now_s, wait_delivery_state,
};
use serde_json::{Value, json};

fn stripe_signature(secret: &str, t: u64, body: &str) -> String {
    format!("t={t},v1={}", hex(&mac(secret.as_bytes(), &[t.to_string().as_bytes(), b".", body.as_bytes()])))
}

const STRIPE_SECRET: &str = "whsec_test_stripe_0123456789";
const GITHUB_SECRET: &str = "github-webhook-secret";
const SHOP_SECRET: &str = "shop-shared-secret";
const SVIX_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn create_source(node: &TestNode, body: Value) -> String {
    let (status, _, created) = node.post_json("/v1/sources", &body).await;
    assert_eq!(status, StatusCode::CREATED, "creating {body} answered {created}");
    assert!(created.get("secret").is_none(), "a source's secret is never shown: {created}");
    created["id"].as_str().expect("id").to_string()
}

/// Posts `body` to a source's ingress with `headers`.
async fn post_in(node: &TestNode, source: &str, body: &str, headers: &[(&str, String)]) -> (StatusCode, Value) {
    let mut request = node.client().post(node.url(&format!("/in/{source}"))).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let (status, _, answer) = node.send(request.body(body.to_string())).await;
    (status, answer)
}

async fn stripe_post(node: &TestNode, source: &str, body: &Value) -> (StatusCode, Value) {
    let text = body.to_string();
    let signature = stripe_signature(STRIPE_SECRET, unix_now_s(), &text);
    post_in(node, source, &text, &[("stripe-signature", signature)]).await
}

/// Deliveries of `endpoint`, settled or not.
async fn deliveries_of(node: &TestNode, endpoint: &str) -> Vec<Value> {
    list_deliveries(node, &format!("endpoint_id={endpoint}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_provider_scheme_takes_its_own_signature_and_refuses_forged_expired_and_missing_ones() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let stripe = create_source(&node, json!({"scheme": "stripe", "secret": STRIPE_SECRET})).await;
    let github = create_source(&node, json!({"scheme": "github", "secret": GITHUB_SECRET})).await;
    let shop = create_source(
        &node,
        json!({"scheme": "hmac-sha256", "secret": SHOP_SECRET, "signature_header": "X-Shop-Hmac",
               "signature_encoding": "base64", "event_id": {"header": "x-shop-event"},
               "event_type": {"pointer": "/topic"}}),
    )
    .await;
    let svix = create_source(&node, json!({"scheme": "standard-webhooks", "secret": SVIX_SECRET})).await;
    let sources = json!([stripe, github, shop, svix]);
    let (endpoint, _) = register_endpoint(&node, &json!({"url": receiver.url("in"), "sources": sources})).await;
    let now = unix_now_s();

    // Stripe: good, forged, expired, missing.
    let body = json!({"id": "evt_stripe_1", "type": "invoice.paid", "data": {"object": {"id": "in_1"}}}).to_string();
    let good = stripe_signature(STRIPE_SECRET, now, &body);
    assert_eq!(post_in(&node, &stripe, &body, &[("stripe-signature", good)]).await.0, StatusCode::OK);
    let forged = stripe_signature("whsec_somebody_else_entirely", now, &body);
    let (status, answer) = post_in(&node, &stripe, &body, &[("stripe-signature", forged)]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    let expired = stripe_signature(STRIPE_SECRET, now - 3_600, &body);
    let (status, answer) = post_in(&node, &stripe, &body, &[("stripe-signature", expired)]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    assert!(answer["detail"].as_str().unwrap_or("").contains("timestamp"), "{answer}");
    assert_eq!(post_in(&node, &stripe, &body, &[]).await.0, StatusCode::UNAUTHORIZED);

    // GitHub.
    let body = json!({"action": "opened", "number": 7}).to_string();
    let good = format!("sha256={}", hex(&mac(GITHUB_SECRET.as_bytes(), &[body.as_bytes()])));
    let headers = |sig: String| {
        vec![
            ("x-hub-signature-256", sig),
            ("x-github-delivery", "gh-1".into()),
            ("x-github-event", "pull_request".into()),
        ]
    };
    assert_eq!(post_in(&node, &github, &body, &headers(good)).await.0, StatusCode::OK);
    let forged = format!("sha256={}", hex(&mac(b"wrong", &[body.as_bytes()])));
    assert_eq!(post_in(&node, &github, &body, &headers(forged)).await.0, StatusCode::UNAUTHORIZED);

    // A plain HMAC in base64.
    let body = json!({"topic": "orders/create", "order": 1}).to_string();
    let good = BASE64.encode(mac(SHOP_SECRET.as_bytes(), &[body.as_bytes()]));
    let headers = |sig: String| vec![("x-shop-hmac", sig), ("x-shop-event", "shop-1".to_string())];
    assert_eq!(post_in(&node, &shop, &body, &headers(good.clone())).await.0, StatusCode::OK);
    assert_eq!(post_in(&node, &shop, "{\"topic\":\"x\"}", &headers(good)).await.0, StatusCode::UNAUTHORIZED);

    // Standard Webhooks.
    let key = BASE64.decode(SVIX_SECRET.trim_start_matches("whsec_")).expect("base64");
    let body = json!({"type": "user.created", "data": {"id": 3}}).to_string();
    let signed = |ts: u64| {
        let sig = BASE64.encode(mac(&key, &[b"msg_1.", ts.to_string().as_bytes(), b".", body.as_bytes()]));
        vec![
            ("webhook-id", "msg_1".to_string()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", format!("v1,{sig}")),
        ]
    };
    assert_eq!(post_in(&node, &svix, &body, &signed(now - 3_600)).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(post_in(&node, &svix, &body, &signed(now)).await.0, StatusCode::OK);

    // Four events, each delivered once, typed as its provider said.
    let mut delivered = Vec::new();
    for delivery in deliveries_of(&node, &endpoint).await {
        let done = wait_delivery_state(&node, delivery["id"].as_str().unwrap(), "delivered", DEADLINE).await;
        let (_, _, event) = node.get_json(&format!("/v1/events/{}", done["event_id"].as_str().unwrap())).await;
        let provider_id = event["inbound"]["provider_event_id"].as_str().unwrap_or("<none>").to_string();
        delivered.push((event["type"].as_str().unwrap().to_string(), provider_id));
    }
    delivered.sort();
    let expected = [
        ("invoice.paid", "evt_stripe_1"),
        ("orders/create", "shop-1"),
        ("pull_request", "gh-1"),
        ("user.created", "msg_1"),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(t, id)| (t.to_string(), id.to_string())).collect();
    assert_eq!(delivered, expected, "nothing refused was stored");
    assert_eq!(receiver.count("in"), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_retrying_one_event_five_times_creates_one_event() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let stripe = create_source(&node, json!({"scheme": "stripe", "secret": STRIPE_SECRET})).await;
    let (endpoint, _) = register_endpoint(&node, &json!({"url": receiver.url("once"), "sources": [stripe]})).await;
    let body = json!({"id": "evt_retried", "type": "charge.succeeded"});
    let (first, second) = tokio::join!(stripe_post(&node, &stripe, &body), stripe_post(&node, &stripe, &body));
    let mut ids = vec![first.1["event_id"].clone(), second.1["event_id"].clone()];
    for _ in 0..3 {
        let (status, answer) = stripe_post(&node, &stripe, &body).await;
        assert_eq!((status, &answer["duplicate"]), (StatusCode::OK, &json!(true)), "{answer}");
        ids.push(answer["event_id"].clone());
    }
    assert_eq!((first.0, second.0), (StatusCode::OK, StatusCode::OK));
    assert!(ids.iter().all(|id| *id == ids[0] && id.is_string()), "one event for five posts: {ids:?}");
    let deliveries = deliveries_of(&node, &endpoint).await;
    assert_eq!(deliveries.len(), 1);
    wait_delivery_state(&node, deliveries[0]["id"].as_str().unwrap(), "delivered", DEADLINE).await;
    assert_eq!(receiver.count("once"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_arriving_after_a_newer_cancellation_of_its_key_ends_ignored_stale_and_replays_on_purpose() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let stripe = create_source(
        &node,
        json!({"scheme": "stripe", "secret": STRIPE_SECRET, "entity_key": "/data/object/id", "version": "/created"}),
    )
    .await;
    let (endpoint, _) = register_endpoint(&node, &json!({"url": receiver.url("subs"), "sources": [stripe]})).await;
    let event = |id: &str, kind: &str, created: u64| json!({"id": id, "type": kind, "created": created, "data": {"object": {"id": "sub_1"}}});
    let (status, canceled) = stripe_post(&node, &stripe, &event("evt_2", "customer.subscription.deleted", 200)).await;
    assert_eq!(status, StatusCode::OK, "{canceled}");
    let first = deliveries_of(&node, &endpoint).await;
    wait_delivery_state(&node, first[0]["id"].as_str().unwrap(), "delivered", DEADLINE).await;

    let (status, updated) = stripe_post(&node, &stripe, &event("evt_1", "customer.subscription.updated", 100)).await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    let all = deliveries_of(&node, &endpoint).await;
    let older = all.iter().find(|d| d["event_id"] == updated["event_id"]).expect("the update's delivery");
    let stale_id = older["id"].as_str().unwrap().to_string();
    let ignored = wait_delivery_state(&node, &stale_id, "ignored_stale", DEADLINE).await;
    let listed = list_deliveries(&node, &format!("endpoint_id={endpoint}&state=ignored_stale")).await;
    assert_eq!(listed.iter().map(|d| d["id"].clone()).collect::<Vec<_>>(), vec![json!(stale_id)]);
    let kinds: Vec<&str> = ignored["timeline"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"ignored_stale") && !kinds.contains(&"attempt"), "{ignored:#}");
    let bodies: Vec<Value> = receiver.requests("subs").iter().map(|r| r.body_json()).collect();
    assert_eq!(bodies.len(), 1, "the older update was not sent: {bodies:?}");
    assert_eq!(bodies[0]["type"], "customer.subscription.deleted");

    let (status, _, answer) = node.post_empty(&format!("/v1/deliveries/{stale_id}/replay")).await;
    assert!(status.is_success(), "{answer}");
    wait_delivery_state(&node, &stale_id, "delivered", DEADLINE).await;
    assert_eq!(receiver.count("subs"), 2, "replayed on purpose, it is sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_and_the_allowlist_answer_429_and_403_and_store_nothing() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let limited =
        create_source(&node, json!({"scheme": "stripe", "secret": STRIPE_SECRET, "rate_limit_per_s": 1})).await;
    let fenced = create_source(
        &node,
        json!({"scheme": "stripe", "secret": STRIPE_SECRET, "allow_cidrs": ["203.0.113.0/24", "2001:db8::/32"]}),
    )
    .await;
    let open =
        create_source(&node, json!({"scheme": "stripe", "secret": STRIPE_SECRET, "allow_cidrs": ["127.0.0.0/8"]}))
            .await;
    let sources = json!([limited, fenced, open]);
    let (endpoint, _) = register_endpoint(&node, &json!({"url": receiver.url("x"), "sources": sources})).await;

    let (status, _) = stripe_post(&node, &limited, &json!({"id": "e1", "type": "t"})).await;
    assert_eq!(status, StatusCode::OK);
    let request = node.client().post(node.url(&format!("/in/{limited}"))).header("content-type", "application/json");
    let body = json!({"id": "e2", "type": "t"}).to_string();
    let signed = request.header("stripe-signature", stripe_signature(STRIPE_SECRET, unix_now_s(), &body)).body(body);
    let (status, headers, answer) = node.send(signed).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert!(headers.get("retry-after").is_some(), "429 says when to come back");

    let (status, answer) = stripe_post(&node, &fenced, &json!({"id": "e3", "type": "t"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(answer["detail"].as_str().unwrap_or("").contains("127.0.0.1"), "{answer}");
    let (status, _) = stripe_post(&node, &open, &json!({"id": "e4", "type": "t"})).await;
    assert_eq!(status, StatusCode::OK, "a loopback caller is in 127.0.0.0/8");

    tokio::time::sleep(Duration::from_millis(200)).await;
    let events: Vec<Value> = deliveries_of(&node, &endpoint).await.iter().map(|d| d["event_id"].clone()).collect();
    assert_eq!(events.len(), 2, "only e1 and e4 were stored: {events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sources_and_bad_requests_get_clear_problems_and_the_ingress_needs_no_token() {
    let node = TestNode::start_with(NodeOptions::default().api_token("operator-token-1")).await;
    for (body, what) in [
        (json!({"scheme": "paypal", "secret": "0123456789"}), "unknown scheme"),
        (json!({"scheme": "hmac-sha256", "secret": "0123456789", "event_id": {"header": "x-id"}}), "no header"),
        (json!({"scheme": "hmac-sha256", "secret": "0123456789", "signature_header": "x-sig"}), "no event id"),
        (json!({"scheme": "github", "secret": "short"}), "short secret"),
        (json!({"scheme": "standard-webhooks", "secret": "not-whsec-at-all"}), "not a whsec"),
        (json!({"scheme": "stripe", "secret": STRIPE_SECRET, "allow_cidrs": ["10.0.0.0/33"]}), "bad CIDR"),
        (json!({"scheme": "stripe", "secret": STRIPE_SECRET, "entity_key": "data.id"}), "bad pointer"),
        (json!({"scheme": "github", "secret": GITHUB_SECRET, "signature_header": "x"}), "plain-only field"),
        (json!({"scheme": "stripe", "secret": STRIPE_SECRET, "colour": "blue"}), "unknown field"),
    ] {
        let response = node.post_json("/v1/sources", &body).await;
        assert_problem(&response, StatusCode::UNPROCESSABLE_ENTITY, what);
    }
    let anonymous = node.client().get(node.url("/v1/sources"));
    assert_eq!(node.send(anonymous).await.0, StatusCode::UNAUTHORIZED, "managing sources takes the token");

    let stripe = create_source(&node, json!({"scheme": "stripe", "secret": STRIPE_SECRET})).await;
    // The ingress takes no token: the signature is the credential.
    let (status, answer) = stripe_post(&node, &stripe, &json!({"id": "evt_ok", "type": "t"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, answer) = stripe_post(&node, &stripe, &json!({"type": "no id"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let text = "not json";
    let sig = stripe_signature(STRIPE_SECRET, unix_now_s(), text);
    assert_eq!(post_in(&node, &stripe, text, &[("stripe-signature", sig)]).await.0, StatusCode::BAD_REQUEST);
    let (status, _) = stripe_post(&node, "src_01ARZ3NDEKTSV4RRFFQ69G5FAV", &json!({"id": "x"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = stripe_post(&node, "not-an-id", &json!({"id": "x"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, _, _) = node.patch_json(&format!("/v1/sources/{stripe}"), &json!({"disabled": true})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = stripe_post(&node, &stripe, &json!({"id": "evt_later", "type": "t"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a disabled source refuses");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_provider_secret_keeps_verifying_through_its_grace_period() {
    let node = TestNode::start().await;
    let github = create_source(&node, json!({"scheme": "github", "secret": GITHUB_SECRET})).await;
    let rotate = json!({"secret": "the-new-github-secret", "grace_period_s": 600});
    let (status, _, view) = node.post_json(&format!("/v1/sources/{github}/rotate-secret"), &rotate).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["previous_secrets_expire_at"].as_array().map(Vec::len), Some(1), "{view}");
    let body = json!({"zen": "keep it simple"}).to_string();
    for (secret, delivery) in [(GITHUB_SECRET, "d-old"), ("the-new-github-secret", "d-new")] {
        let sig = format!("sha256={}", hex(&mac(secret.as_bytes(), &[body.as_bytes()])));
        let headers = [("x-hub-signature-256", sig), ("x-github-delivery", delivery.to_string())];
        let (status, answer) = post_in(&node, &github, &body, &headers).await;
        assert_eq!(status, StatusCode::OK, "{secret}: {answer}");
    }
    let (_, _, listed) = node.get_json("/v1/sources").await;
    assert!(!listed.to_string().contains("github-secret"), "secrets never leave the node: {listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbound_request_is_stored_sealed_under_the_keyring_and_delivered_in_clear() {
    let key = BASE64.encode([7u8; 32]);
    let options = NodeOptions::default().arg("--keyring-text").arg(format!("active = k1; k1 = {key}"));
    let node = TestNode::start_with(options).await;
    let receiver = ScriptedReceiver::start().await;
    let stripe = create_source(&node, json!({"scheme": "stripe", "secret": STRIPE_SECRET})).await;
    let (endpoint, _) = register_endpoint(&node, &json!({"url": receiver.url("sealed"), "sources": [stripe]})).await;
    let body = json!({"id": "evt_secret", "type": "card.updated", "last4": "4242"});
    let (status, answer) = stripe_post(&node, &stripe, &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (_, _, event) = node.get_json(&format!("/v1/events/{}", answer["event_id"].as_str().unwrap())).await;
    assert_eq!(event["key_id"], "k1", "sealed under the active key: {event}");
    assert_eq!(event["payload"], body, "opened for the operator");
    let delivery = deliveries_of(&node, &endpoint).await.remove(0);
    wait_delivery_state(&node, delivery["id"].as_str().unwrap(), "delivered", DEADLINE).await;
    assert_eq!(receiver.requests("sealed")[0].body_json(), body, "the receiver gets the provider's body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_flood_from_one_address_cannot_make_the_provider_see_429() {
    let node = TestNode::start().await;
    let limited =
        create_source(&node, json!({"scheme": "stripe", "secret": STRIPE_SECRET, "rate_limit_per_s": 2})).await;
    // The flood comes from 127.0.0.2; the provider posts from 127.0.0.1.
    let stranger = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .no_proxy()
        .build()
        .expect("client");
    let url = node.url(&format!("/in/{limited}"));
    let mut statuses = Vec::new();
    for n in 0..60 {
        let body = json!({"id": format!("forged{n}"), "type": "t"}).to_string();
        let forged = stripe_signature("whsec_a_guess_at_the_secret_00", unix_now_s(), &body);
        let request = stranger.post(&url).header("content-type", "application/json").header("stripe-signature", forged);
        statuses.push(request.body(body).send().await.expect("answered").status());
    }
    assert_eq!(statuses[0], StatusCode::UNAUTHORIZED, "a forged signature is a 401");
    assert!(statuses.contains(&StatusCode::TOO_MANY_REQUESTS), "the flood's own address is cut off: {statuses:?}");
    let (status, answer) = stripe_post(&node, &limited, &json!({"id": "evt_real", "type": "t"})).await;
    assert_eq!(status, StatusCode::OK, "the provider's own request went through the flood: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_github_request_sent_again_under_another_delivery_id_is_a_repeat() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let github = create_source(&node, json!({"scheme": "github", "secret": GITHUB_SECRET})).await;
    let (endpoint, _) = register_endpoint(&node, &json!({"url": receiver.url("gh"), "sources": [github]})).await;
    let body = json!({"action": "opened", "number": 7}).to_string();
    let signature = format!("sha256={}", hex(&mac(GITHUB_SECRET.as_bytes(), &[body.as_bytes()])));
    let mut ids = Vec::new();
    for delivery in ["72d3162e-cc78-11e3-81ab-4c9367dc0958", "forged-1", "forged-2"] {
        let headers = [
            ("x-hub-signature-256", signature.clone()),
            ("x-github-delivery", delivery.to_string()),
            ("x-github-event", "pull_request".to_string()),
        ];
        let (status, answer) = post_in(&node, &github, &body, &headers).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        ids.push(answer["event_id"].clone());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "one event: {ids:?}");
    assert_eq!(deliveries_of(&node, &endpoint).await.len(), 1, "the replays created nothing");
    // Another body is another event, whatever its delivery id.
    let other = json!({"action": "closed", "number": 7}).to_string();
    let signature = format!("sha256={}", hex(&mac(GITHUB_SECRET.as_bytes(), &[other.as_bytes()])));
    let headers =
        [("x-hub-signature-256", signature), ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_string())];
    let (status, answer) = post_in(&node, &github, &other, &headers).await;
    assert_eq!((status, answer.get("duplicate")), (StatusCode::OK, None), "{answer}");
    assert_eq!(deliveries_of(&node, &endpoint).await.len(), 2);
}
